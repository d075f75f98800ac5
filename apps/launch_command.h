// `qtrain launch --nproc N [--master-addr A] [--master-port P] COMMAND ARGS...`: runs N ranks of
// `qtrain COMMAND ARGS...` on this machine, as `torchrun --no-python --nproc-per-node N` would.
// See engine/dist/launcher.h and docs/DISTRIBUTED.md.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

// `exit_code` receives the ranks' result (engine::dist::launch_local).
void add_launch_command(CLI::App& app, int& exit_code);

}  // namespace qtrain::apps
