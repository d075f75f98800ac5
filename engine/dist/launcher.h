// `qtrain launch`: starts the ranks of a one-machine run the way torchrun does (for users without
// Python), watches them, and ends the run as one.
#pragma once

#include <string>
#include <vector>

namespace qtrain::engine::dist {

struct LaunchOptions {
  int nproc = 1;  // ranks on this machine
  std::string master_addr = "127.0.0.1";
  // The rendezvous store's port; 0: any free port (the ranks are told which).
  int master_port = 29500;
  std::string program;  // the executable every rank runs
};

// Serves the rendezvous store itself (a TCPStore, as torchrun's agent does, so it outlives any
// rank), then starts `nproc` copies of `program args...` with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True and
// TORCHELASTIC_RESTART_COUNT=0 set, and OMP_NUM_THREADS=1 when nproc > 1 and it is unset (as
// torchrun does). SIGINT and SIGTERM are passed on to every rank. When a rank exits non-zero or
// is killed, the others get SIGTERM, then SIGKILL after 30 s. Returns 0 when every rank exits 0,
// else the first failed rank's exit code (128 + signal for a killed rank). A rank dies with the
// launcher (PR_SET_PDEATHSIG).
int launch_local(const LaunchOptions& options, const std::vector<std::string>& args);

}  // namespace qtrain::engine::dist
