// The log of a qtrain process: warnings and errors through spdlog on stderr, as
// "qtrain: error: ..." and, in a run of several ranks, behind PyTorch's rank tag,
// "[rank1]: qtrain: error: ...", so that the interleaved stderr of the ranks (torchrun, qtrain
// launch, a SLURM job) says which rank said what. libtorch's own warnings (TORCH_WARN) take the
// same way (warnings_to_log.h). Progress and results stay on stdout, printed by rank 0 alone
// (engine/train/data_parallel.h: RankConsole). See Note [Two fmt libraries].
#pragma once

#include <ostream>
#include <string>

#include "engine/dist/dist_env.h"

namespace qtrain::engine::dist {

// "[rank<R>]: " in a run of several ranks, else "".
std::string rank_tag(const DistEnv& env);

// Makes the process's log write to `out` (stderr when null) with `env`'s rank tag. Call once,
// first thing in main; until then the log writes untagged to stderr.
void start_rank_log(const DistEnv& env, std::ostream* out = nullptr);

void log_warning(const std::string& message);
void log_error(const std::string& message);

}  // namespace qtrain::engine::dist
