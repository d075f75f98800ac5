// Linked when qtrain is built without CUDA kernels: a CUDA tensor reaching a quantization op
// gets this error instead of a link failure. See kbit_device.h and int8_device.h.
#include <c10/util/Exception.h>

#include "ops/quant/int8_device.h"
#include "ops/quant/kbit_device.h"

namespace qtrain::ops::device {
namespace {
[[noreturn]] void no_cuda() {
  TORCH_CHECK(false,
              "qtrain was built without CUDA kernels (no nvcc or no CUDA libtorch at configure time); "
              "rebuild on a machine with the CUDA toolkit, or keep the tensors on the CPU");
}
}  // namespace

void quantize_4bit(const at::Tensor&, QuantType, int64_t, at::Tensor&, at::Tensor&) {
  no_cuda();
}
void dequantize_4bit(const at::Tensor&, const at::Tensor&, QuantType, int64_t, at::Tensor&) {
  no_cuda();
}
at::Tensor dequantize_nested_absmax(const NestedAbsmax&) {
  no_cuda();
}
void int8_vectorwise_quant(const at::Tensor&, float, at::Tensor&, at::Tensor&) {
  no_cuda();
}
void int8_vectorwise_dequant(const at::Tensor&, const at::Tensor&, at::Tensor&) {
  no_cuda();
}

}  // namespace qtrain::ops::device
