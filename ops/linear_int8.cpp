// Autograd for a linear layer on a frozen LLM.int8() weight; see linear_int8.h.
#include "ops/linear_int8.h"

#include <ATen/ATen.h>

#include "ops/linear_args.h"

namespace qtrain::ops {

// See Note [Quantized linear autograd] in linear_4bit.cpp: the node saves CB and SCB (through
// save_for_backward), never a dequantized weight and not x. A recompute under checkpointing
// reads the same CB/SCB; nothing here writes them (See Note [SCB is never guessed] in int8.cpp).

at::Tensor LinearInt8Function::forward(torch::autograd::AutogradContext* ctx,
                                       const at::Tensor& x,
                                       const std::optional<at::Tensor>& bias,
                                       const Int8Weight& weight,
                                       Int8Compute compute,
                                       double threshold) {
  ctx->save_for_backward({weight.cb(), weight.scb()});
  ctx->saved_data["has_bias"] = bias.has_value();
  if (compute == Int8Compute::llm_int8) return int8_mixed_matmul(x, weight, bias, threshold);
  return at::linear(x, weight.dequantize(x.scalar_type()), bias);
}

torch::autograd::variable_list LinearInt8Function::backward(torch::autograd::AutogradContext* ctx,
                                                            torch::autograd::variable_list grad_out) {
  const auto saved = ctx->get_saved_variables();  // throws if CB or SCB was overwritten
  const auto& g = grad_out[0];                    // [..., out]
  at::Tensor grad_x, grad_bias;
  if (ctx->needs_input_grad(0)) {
    const auto w = Int8Weight::from_quantized(saved[0], saved[1], "linear_int8 backward");
    grad_x = at::matmul(g, w.dequantize(g.scalar_type()));
  }
  if (ctx->saved_data.at("has_bias").toBool() && ctx->needs_input_grad(1)) {
    grad_bias = g.reshape({-1, g.size(-1)}).sum(0);
  }
  return {grad_x, grad_bias, at::Tensor(), at::Tensor(), at::Tensor()};
}

at::Tensor linear_int8(const at::Tensor& x,
                       const Int8Weight& weight,
                       const std::optional<at::Tensor>& bias,
                       Int8Compute compute,
                       double threshold) {
  check_linear_args(x, weight.out_features(), weight.in_features(), bias, "linear_int8");
  TORCH_CHECK(x.device() == weight.cb().device(),
              "linear_int8: x is on ",
              x.device(),
              " but the weight is on ",
              weight.cb().device());
  return LinearInt8Function::apply(x, defined_or_none(bias), weight, compute, threshold);
}

}  // namespace qtrain::ops
