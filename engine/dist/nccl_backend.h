// c10d's NCCL process group (CUDA tensors), built from a store. The one place that includes
// ProcessGroupNCCL.hpp (nccl_backend_cuda.cpp); a build without CUDA has nccl_backend_nocuda.cpp,
// which refuses with the reason.
#pragma once

#include <chrono>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace qtrain::engine::dist {

// Whether this build can make an NCCL process group.
bool nccl_built();

// Connects to every other rank through `store` on `device` (this rank's GPU, which becomes the
// current device), eagerly: blocks until all world_size ranks have come, or `timeout`, which also
// bounds every collective (NCCL's watchdog then takes the process down; See Note [NCCL failures]).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank,
                                                    int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const at::Device& device);

}  // namespace qtrain::engine::dist
