// See nccl_backend.h.
#include "engine/dist/nccl_backend.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace qtrain::engine::dist {

// Note [NCCL failures]
// NCCL collectives are asynchronous: `wait()` only orders the current CUDA stream after them, so a
// dead or hung peer is not an exception in the collective's caller, as with Gloo. The process
// group's watchdog thread checks every collective against Options::timeout (ddp_timeout) and, on
// a timeout or an NCCL error, takes the whole process down with its own message
// (TORCH_NCCL_ASYNC_ERROR_HANDLING, which torchrun sets to 1: abort the communicator, then the
// process). So a failed NCCL rank never hangs the others past ddp_timeout, but their message is
// NCCL's, not the roll call of Note [Naming a failed rank]; the rendezvous, the store and rank 0's
// file writes are the same as with Gloo.
//
// The layout of ProcessGroupNCCL::Options (inline in this file) depends on nccl.h: the header must
// be the one torch was built with. CMake takes it from the nvidia-nccl wheel beside torch and
// refuses an older one (engine/CMakeLists.txt).

bool nccl_built() {
  return true;
}

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank,
                                                    int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const at::Device& device) {
  TORCH_CHECK(device.is_cuda() && device.has_index(), "an NCCL process group needs a GPU with an index, not ", device);
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
  pg->setBoundDeviceId(device);
  pg->eagerConnectSingleDevice(device);
  return pg;
}

}  // namespace qtrain::engine::dist
