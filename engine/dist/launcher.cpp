// See launcher.h.
#include "engine/dist/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

extern char** environ;

namespace qtrain::engine::dist {
namespace {

using Clock = std::chrono::steady_clock;

// How long ranks have to exit after SIGTERM before SIGKILL (torchrun's value).
constexpr std::chrono::seconds kTermGrace{30};

// The environment of rank `rank`: this process's, with the launch variables set.
std::vector<std::string> rank_environment(const LaunchOptions& o, int port, int rank) {
  std::map<std::string, std::string> set = {{"RANK", std::to_string(rank)},
                                            {"LOCAL_RANK", std::to_string(rank)},
                                            {"GROUP_RANK", "0"},
                                            {"WORLD_SIZE", std::to_string(o.nproc)},
                                            {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
                                            {"MASTER_ADDR", o.master_addr},
                                            {"MASTER_PORT", std::to_string(port)},
                                            {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                            {"TORCHELASTIC_RESTART_COUNT", "0"}};
  if (o.nproc > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) set["OMP_NUM_THREADS"] = "1";
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (set.count(kv.substr(0, kv.find('='))) == 0) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Exit code 0..255, or 128 + signal.
int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
}

// Blocks SIGINT, SIGTERM and SIGCHLD for the launcher's lifetime, so that they are taken with
// sigtimedwait in the wait loop (no handler, no global state), and restores the mask after.
class SignalMask {
 public:
  SignalMask() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SignalMask() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalMask(const SignalMask&) = delete;
  SignalMask& operator=(const SignalMask&) = delete;
  const sigset_t& set() const { return set_; }
  const sigset_t& old() const { return old_; }

 private:
  sigset_t set_{}, old_{};
};

}  // namespace

int launch_local(const LaunchOptions& o, const std::vector<std::string>& args) {
  TORCH_CHECK(o.nproc >= 1, "qtrain launch: --nproc ", o.nproc, " must be 1 or more");
  TORCH_CHECK(!args.empty(), "qtrain launch: no command to run; e.g. qtrain launch --nproc 2 train cfg.yaml");
  // Before the store starts its threads, so that they inherit the mask and never take the signals.
  SignalMask mask;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.master_port);
  so.isServer = true;
  so.waitWorkers = false;
  std::optional<c10d::TCPStore> store;
  try {
    store.emplace(o.master_addr, so);
  } catch (const std::exception& e) {
    TORCH_CHECK(false,
                "qtrain launch: cannot serve the rendezvous store at ",
                o.master_addr,
                ":",
                o.master_port,
                " (",
                e.what(),
                "); pick a free port with --master-port, or 0 for any");
  }
  const int port = store->getPort();

  std::vector<std::string> argv = {o.program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::map<pid_t, int> rank_of;
  for (int rank = 0; rank < o.nproc; ++rank) {
    auto env = rank_environment(o, port, rank);
    auto c_env = c_strings(env);
    auto c_argv = c_strings(argv);
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    TORCH_CHECK(pid >= 0, "qtrain launch: fork failed for rank ", rank, ": ", std::strerror(errno));
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec: the launcher has threads.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(1);  // the launcher died before the line above
      pthread_sigmask(SIG_SETMASK, &mask.old(), nullptr);
      ::execve(c_argv[0], c_argv.data(), c_env.data());
      ::_exit(127);
    }
    rank_of[pid] = rank;
  }

  int result = 0;
  bool stopping = false;   // a rank failed: the others were sent SIGTERM
  bool forwarded = false;  // the user's SIGINT/SIGTERM went to every rank
  Clock::time_point kill_at;
  while (!rank_of.empty()) {
    const timespec tick{0, 200'000'000};
    siginfo_t info{};
    const int sig = ::sigtimedwait(&mask.set(), &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      forwarded = true;
      for (const auto& [pid, rank] : rank_of) ::kill(pid, sig);
    }
    int status = 0;
    pid_t pid = 0;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      const auto it = rank_of.find(pid);
      if (it == rank_of.end()) continue;
      const int rank = it->second;
      rank_of.erase(it);
      if (exit_code(status) == 0) continue;
      if (result == 0) result = exit_code(status);
      if (stopping || forwarded) continue;
      std::fprintf(stderr, "qtrain launch: rank %d %s; stopping the other ranks\n", rank, how_it_ended(status).c_str());
      stopping = true;
      kill_at = Clock::now() + kTermGrace;
      for (const auto& [other, r] : rank_of) ::kill(other, SIGTERM);
    }
    if (stopping && Clock::now() >= kill_at) {
      for (const auto& [other, r] : rank_of) ::kill(other, SIGKILL);
    }
  }
  return result;
}

}  // namespace qtrain::engine::dist
