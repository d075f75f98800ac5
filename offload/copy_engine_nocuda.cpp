// Linked when qtrain is built without CUDA: there is no device to copy to. See copy_engine.h.
#include "offload/copy_engine.h"

#include <c10/util/Exception.h>

namespace qtrain::offload {

std::shared_ptr<CopyEngine> make_cuda_copy_engine(const at::Device& device) {
  TORCH_CHECK(false,
              "offloading layers to ",
              device,
              " needs a qtrain built with CUDA (this build has no CUDA kernels); "
              "rebuild on a machine with the CUDA toolkit, or set offload_layers: 0");
}

}  // namespace qtrain::offload
