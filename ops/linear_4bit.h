// y = x W^T + b for a frozen 4-bit (NF4/FP4) weight, with autograd. See Note [Quantized linear
// autograd] in linear_4bit.cpp. LoRA is not part of this op; it composes on top.
#pragma once

#include <memory>
#include <optional>

#include <torch/csrc/autograd/custom_function.h>

#include "ops/quant/kbit.h"

namespace qtrain::ops {

// x: [..., in] float32/bf16/fp16; weight: shape [out, in]; bias: [out] or none. Returns
// [..., out] in x's dtype. Gradients flow to x (and bias if it requires grad), never to the
// weight.
at::Tensor linear_4bit(const at::Tensor& x, const Packed4bit& weight, const std::optional<at::Tensor>& bias = {});

struct Linear4bitFunction : public torch::autograd::Function<Linear4bitFunction> {
  // Tensor arguments: x, bias (if any; an optional, since autograd rejects undefined inputs), then the weight's stored
  // tensors.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& x,
                            const std::optional<at::Tensor>& bias,
                            const Packed4bit& weight);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out);
};

}  // namespace qtrain::ops
