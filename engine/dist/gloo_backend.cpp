// See gloo_backend.h.
#include "engine/dist/gloo_backend.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace qtrain::engine::dist {

// Note [Gloo declarations]
// The torch wheel carries Gloo compiled into libtorch_cpu but ships none of Gloo's headers, and
// ProcessGroupGloo.hpp includes five of them. engine/dist/gloo_decl/gloo/ holds project-owned
// stand-ins with only the declarations that header needs to compile: Gloo's objects sit behind
// smart pointers there, so the class layout does not depend on them (sizeof(ProcessGroupGloo) is
// 488 and sizeof(Options) 176 with these and with Debian's real headers, the sizes libtorch's own
// code allocates on torch 2.11). The rule that keeps this safe: touch Gloo only through
// c10d::Backend's virtual functions and the three exported factories (the constructor,
// Options::Options, createDeviceForHostname/Interface/Default); never a gloo:: object, GlooStore
// or _getStore(). A torch upgrade that needs more declarations fails to compile, never silently.

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank,
                                                    int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr) {
  auto options = c10::make_intrusive<c10d::ProcessGroupGloo::Options>(timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    options->devices = {c10d::ProcessGroupGloo::createDeviceForInterface(ifname)};
  } else if (master_addr == "localhost" || master_addr.rfind("127.", 0) == 0) {
    options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")};
  } else {
    options->devices = {c10d::ProcessGroupGloo::createDefaultDevice()};
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

}  // namespace qtrain::engine::dist
