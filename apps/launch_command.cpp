// See launch_command.h.
#include "apps/launch_command.h"

#include <unistd.h>

#include <array>

#include <c10/util/Exception.h>

#include "engine/dist/launcher.h"

namespace qtrain::apps {
namespace {

// This executable's path, so that the ranks run the same qtrain whatever PATH says.
std::string self_path() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  TORCH_CHECK(n > 0, "qtrain launch: cannot read /proc/self/exe to find the qtrain binary");
  return std::string(buf.data(), static_cast<size_t>(n));
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<engine::dist::LaunchOptions>();
  auto* cmd = app.add_subcommand("launch",
                                 "Run N ranks of a qtrain command on this machine, as torchrun does "
                                 "(e.g. qtrain launch --nproc 2 train cfg.yaml)");
  cmd->add_option("--nproc", o->nproc, "ranks to start on this machine (one per GPU)")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--master-addr", o->master_addr, "address the rendezvous store listens on")->capture_default_str();
  cmd->add_option("--master-port", o->master_port, "port of the rendezvous store; 0: any free port")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  // Everything from the first positional on is the ranks' command line, options included.
  cmd->prefix_command();
  cmd->callback([o, cmd, &exit_code] {
    o->program = self_path();
    exit_code = engine::dist::launch_local(*o, cmd->remaining());
  });
}

}  // namespace qtrain::apps
