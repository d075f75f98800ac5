// Where this process stands in a multi-process run, read from the variables torchrun sets (and
// `qtrain launch`, SLURM scripts and other schedulers set the same way): RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
// TORCHELASTIC_RESTART_COUNT. A process started without them is a run of one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace qtrain::engine::dist {

struct DistEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  // The rank among the processes of this machine: the index of its GPU.
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr;  // the rendezvous store's host
  int master_port = 0;
  // torchrun's agent already serves the store at MASTER_ADDR:MASTER_PORT, so every rank is a
  // client; otherwise rank 0 serves it.
  bool agent_store = false;
  // torchrun's restart attempt, so that a restarted run's keys never meet the last attempt's.
  int64_t restart_count = 0;
};

// Reads the variables through `lookup` (null for an unset variable). WORLD_SIZE unset or 1 is a
// run of one, whatever else is set. Errors name the variable, its value and the fix.
DistEnv dist_env_from(const std::function<const char*(const char*)>& lookup);
// From the process environment.
DistEnv dist_env();

}  // namespace qtrain::engine::dist
