// See nccl_backend.h: this build has no CUDA, so no NCCL.
#include "engine/dist/nccl_backend.h"

#include <c10/util/Exception.h>

namespace qtrain::engine::dist {

bool nccl_built() {
  return false;
}

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(
    const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds, const at::Device&) {
  TORCH_CHECK(false,
              "this qtrain was built without CUDA, so it has no NCCL; use ddp_backend: gloo, or rebuild "
              "where nvcc and a CUDA libtorch are found");
}

}  // namespace qtrain::engine::dist
