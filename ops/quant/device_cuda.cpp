// Linked when qtrain is built with CUDA kernels: hands CUDA tensors to the torch-free kernels of
// ops/cuda (raw pointers, the current stream of the tensor's device). See kbit_device.h and
// int8_device.h; device_nocuda.cpp is the build without CUDA.
#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/int8.h"
#include "ops/cuda/kbit.h"
#include "ops/quant/codebook.h"
#include "ops/quant/int8_device.h"
#include "ops/quant/kbit_device.h"

namespace qtrain::ops::device {
namespace {

cuda::Dtype cuda_dtype(at::ScalarType t, const char* what) {
  switch (t) {
    case at::kFloat:
      return cuda::Dtype::f32;
    case at::kHalf:
      return cuda::Dtype::f16;
    case at::kBFloat16:
      return cuda::Dtype::bf16;
    default:
      TORCH_CHECK(false, what, " has dtype ", t, "; the CUDA kernels accept float32, float16 and bfloat16");
  }
}

cuda::Quantizer4bitTable quantizer_table(QuantType type) {
  const Quantizer4bit& q = quantizer_4bit(type);
  cuda::Quantizer4bitTable t{};
  std::copy(q.sorted_codes.begin(), q.sorted_codes.end(), t.sorted_codes);
  std::copy(q.midpoints.begin(), q.midpoints.end(), t.midpoints);
  return t;
}

cuda::Codebook4bitTable codebook_table(QuantType type) {
  const auto& code = dequant_lut_4bit(type);  // FP4 code 8 decodes to -0.0, as on the CPU
  cuda::Codebook4bitTable t{};
  std::copy(code.begin(), code.end(), t.values);
  return t;
}

// The kernels read and write raw memory: a wrong size or device here would be silent corruption,
// so these cheap checks stay on even though callers validate.
void check_buffer(
    const at::Tensor& t, const at::Device& device, at::ScalarType dtype, int64_t numel, const char* what) {
  TORCH_CHECK(t.defined() && t.device() == device,
              what,
              " must be on ",
              device,
              ", got ",
              t.defined() ? t.device().str() : std::string("an undefined tensor"));
  TORCH_CHECK(t.scalar_type() == dtype, what, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.numel() == numel, what, " must have ", numel, " elements, got ", t.numel());
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

int64_t blocks_of(int64_t n, int64_t blocksize) {
  return (n + blocksize - 1) / blocksize;
}

}  // namespace

void quantize_4bit(const at::Tensor& x, QuantType type, int64_t blocksize, at::Tensor& packed, at::Tensor& absmax) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "quantize_4bit (CUDA): x must be a contiguous CUDA tensor");
  check_blocksize_4bit(blocksize);
  const int64_t n = x.numel();
  check_buffer(packed, x.device(), at::kByte, (n + 1) / 2, "quantize_4bit (CUDA): packed");
  check_buffer(absmax, x.device(), at::kFloat, blocks_of(n, blocksize), "quantize_4bit (CUDA): absmax");
  const c10::cuda::CUDAGuard guard(x.device());
  cuda::quantize_4bit(x.const_data_ptr(),
                      cuda_dtype(x.scalar_type(), "quantize_4bit (CUDA): x"),
                      n,
                      static_cast<int>(blocksize),
                      quantizer_table(type),
                      packed.data_ptr<uint8_t>(),
                      absmax.data_ptr<float>(),
                      at::cuda::getCurrentCUDAStream());
}

void dequantize_4bit(
    const at::Tensor& packed, const at::Tensor& absmax, QuantType type, int64_t blocksize, at::Tensor& out) {
  TORCH_CHECK(out.is_cuda() && out.is_contiguous(), "dequantize_4bit (CUDA): out must be a contiguous CUDA tensor");
  check_blocksize_4bit(blocksize);
  const int64_t n = out.numel();
  check_buffer(packed, out.device(), at::kByte, (n + 1) / 2, "dequantize_4bit (CUDA): packed");
  check_buffer(absmax, out.device(), at::kFloat, blocks_of(n, blocksize), "dequantize_4bit (CUDA): absmax");
  const c10::cuda::CUDAGuard guard(out.device());
  cuda::dequantize_4bit(packed.const_data_ptr<uint8_t>(),
                        absmax.const_data_ptr<float>(),
                        n,
                        static_cast<int>(blocksize),
                        codebook_table(type),
                        out.data_ptr(),
                        cuda_dtype(out.scalar_type(), "dequantize_4bit (CUDA): out"),
                        at::cuda::getCurrentCUDAStream());
}

at::Tensor dequantize_nested_absmax(const NestedAbsmax& nested) {
  const at::Tensor qabsmax = nested.qabsmax.contiguous();
  TORCH_CHECK(qabsmax.is_cuda(), "dequantize_nested_absmax (CUDA): qabsmax must be a CUDA tensor");
  TORCH_CHECK(
      nested.blocksize > 0, "dequantize_nested_absmax (CUDA): blocksize must be positive, got ", nested.blocksize);
  const at::Device device = qabsmax.device();
  const int64_t n = qabsmax.numel();
  const at::Tensor absmax2 = nested.absmax2.contiguous();
  const at::Tensor code = nested.code.contiguous();
  check_buffer(qabsmax, device, at::kByte, n, "dequantize_nested_absmax (CUDA): qabsmax");
  check_buffer(absmax2, device, at::kFloat, blocks_of(n, nested.blocksize), "dequantize_nested_absmax (CUDA): absmax2");
  check_buffer(code, device, at::kFloat, 256, "dequantize_nested_absmax (CUDA): code");
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor out = at::empty(qabsmax.sizes(), qabsmax.options().dtype(at::kFloat));
  cuda::dequantize_nested_absmax(qabsmax.const_data_ptr<uint8_t>(),
                                 absmax2.const_data_ptr<float>(),
                                 code.const_data_ptr<float>(),
                                 nested.offset,
                                 n,
                                 nested.blocksize,
                                 out.data_ptr<float>(),
                                 at::cuda::getCurrentCUDAStream());
  return out;
}

void int8_vectorwise_quant(const at::Tensor& a, float threshold, at::Tensor& q, at::Tensor& row_absmax) {
  TORCH_CHECK(a.is_cuda() && a.dim() == 2 && a.is_contiguous(),
              "int8_vectorwise_quant (CUDA): a must be a contiguous 2-D CUDA tensor, got shape ",
              a.sizes());
  const int64_t rows = a.size(0), cols = a.size(1);
  check_buffer(q, a.device(), at::kChar, rows * cols, "int8_vectorwise_quant (CUDA): q");
  check_buffer(row_absmax, a.device(), at::kFloat, rows, "int8_vectorwise_quant (CUDA): row_absmax");
  const c10::cuda::CUDAGuard guard(a.device());
  cuda::int8_vectorwise_quant(a.const_data_ptr(),
                              cuda_dtype(a.scalar_type(), "int8_vectorwise_quant (CUDA): a"),
                              rows,
                              cols,
                              threshold,
                              q.data_ptr<int8_t>(),
                              row_absmax.data_ptr<float>(),
                              at::cuda::getCurrentCUDAStream());
}

void int8_vectorwise_dequant(const at::Tensor& q, const at::Tensor& row_absmax, at::Tensor& out) {
  TORCH_CHECK(q.is_cuda() && q.dim() == 2 && q.is_contiguous(),
              "int8_vectorwise_dequant (CUDA): q must be a contiguous 2-D CUDA tensor, got shape ",
              q.sizes());
  const int64_t rows = q.size(0), cols = q.size(1);
  check_buffer(q, q.device(), at::kChar, rows * cols, "int8_vectorwise_dequant (CUDA): q");
  check_buffer(row_absmax, q.device(), at::kFloat, rows, "int8_vectorwise_dequant (CUDA): row_absmax");
  check_buffer(out, q.device(), at::kFloat, rows * cols, "int8_vectorwise_dequant (CUDA): out");
  const c10::cuda::CUDAGuard guard(q.device());
  cuda::int8_vectorwise_dequant(q.const_data_ptr<int8_t>(),
                                row_absmax.const_data_ptr<float>(),
                                rows,
                                cols,
                                out.data_ptr<float>(),
                                at::cuda::getCurrentCUDAStream());
}

}  // namespace qtrain::ops::device
