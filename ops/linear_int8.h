// y = x W^T + b for a frozen LLM.int8() weight, with autograd. See Note [Quantized linear
// autograd] in linear_4bit.cpp.
#pragma once

#include <optional>

#include <torch/csrc/autograd/custom_function.h>

#include "ops/quant/int8.h"

namespace qtrain::ops {

// How the forward product is computed.
enum class Int8Compute : uint8_t {
  // W = CB * SCB / 127 in x's dtype, then a float matmul: bitsandbytes' MatMul8bitFp, what it
  // trains with on CPU. The most accurate; the default.
  dequantize,
  // LLM.int8(): x quantized row-wise, int8 product, outlier columns (|x| >= threshold) in x's
  // dtype: bitsandbytes' MatMul8bitLt.
  llm_int8,
};

// x: [..., in] float32/bf16/fp16; weight [out, in]; bias: [out] or none. Returns [..., out] in
// x's dtype. Backward (both modes): grad_x = grad_y (CB * SCB / 127).
at::Tensor linear_int8(const at::Tensor& x,
                       const Int8Weight& weight,
                       const std::optional<at::Tensor>& bias = {},
                       Int8Compute compute = Int8Compute::dequantize,
                       double threshold = 6.0);

struct LinearInt8Function : public torch::autograd::Function<LinearInt8Function> {
  // Tensor arguments: x, bias (if any; an optional, since autograd rejects undefined inputs), CB, SCB.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& x,
                            const std::optional<at::Tensor>& bias,
                            const Int8Weight& weight,
                            Int8Compute compute,
                            double threshold);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out);
};

}  // namespace qtrain::ops
