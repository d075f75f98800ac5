// c10d's Gloo process group (CPU tensors, TCP), built from a store. The one place that includes
// ProcessGroupGloo.hpp; see Note [Gloo declarations] in the .cpp.
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace qtrain::engine::dist {

// Connects to every other rank through `store` (blocks until all world_size ranks have come, or
// `timeout`). Its sockets bind to the interface named by GLOO_SOCKET_IFNAME when set (as in
// PyTorch), to 127.0.0.1 when `master_addr` is a loopback address, else to this host's address.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank,
                                                    int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr);

}  // namespace qtrain::engine::dist
