// Autograd for a linear layer on a frozen 4-bit weight; see linear_4bit.h.
#include "ops/linear_4bit.h"

#include <ATen/ATen.h>

#include "ops/linear_args.h"

namespace qtrain::ops {

// Note [Quantized linear autograd]
// Forward dequantizes the weight into a temporary in x's dtype, multiplies, and drops the
// temporary. The autograd node saves only the packed weight's own tensors (codes and absmax,
// through save_for_backward) and the few scalars that describe them; it saves neither a
// dequantized weight nor the input x: the base weight is frozen, so no weight gradient needs x.
// Backward dequantizes again: grad_x = grad_y W.
// Saving the packed tensors with save_for_backward (not as plain handles, bitsandbytes issue
// #2034) means that if anything overwrites them in place between forward and backward (a
// streaming buffer reused too early), backward stops with autograd's "modified by an inplace
// operation" error instead of computing wrong gradients.

namespace {

std::vector<at::Tensor> stored_tensors(const Packed4bit& w) {
  if (w.nested) return {w.packed, w.nested->qabsmax, w.nested->absmax2, w.nested->code};
  return {w.packed, w.absmax};
}

Packed4bit packed_from_saved(const torch::autograd::AutogradContext& ctx,
                             const torch::autograd::variable_list& saved,
                             size_t first) {
  Packed4bit w;
  w.packed = saved[first];
  w.quant_type = static_cast<QuantType>(ctx.saved_data.at("quant_type").toInt());
  w.blocksize = ctx.saved_data.at("blocksize").toInt();
  w.shape = ctx.saved_data.at("shape").toIntVector();
  w.dtype = static_cast<at::ScalarType>(ctx.saved_data.at("dtype").toInt());
  if (ctx.saved_data.at("nested").toBool()) {
    NestedAbsmax n;
    n.qabsmax = saved[first + 1];
    n.absmax2 = saved[first + 2];
    n.code = saved[first + 3];
    n.offset = static_cast<float>(ctx.saved_data.at("offset").toDouble());
    w.nested = std::move(n);
  } else {
    w.absmax = saved[first + 1];
  }
  return w;
}

}  // namespace

at::Tensor Linear4bitFunction::forward(torch::autograd::AutogradContext* ctx,
                                       const at::Tensor& x,
                                       const std::optional<at::Tensor>& bias,
                                       const Packed4bit& weight) {
  auto saved = stored_tensors(weight);
  ctx->save_for_backward(saved);
  ctx->saved_data["quant_type"] = static_cast<int64_t>(weight.quant_type);
  ctx->saved_data["blocksize"] = weight.blocksize;
  ctx->saved_data["shape"] = weight.shape;
  ctx->saved_data["dtype"] = static_cast<int64_t>(weight.dtype);
  ctx->saved_data["nested"] = weight.nested.has_value();
  ctx->saved_data["offset"] = weight.nested ? static_cast<double>(weight.nested->offset) : 0.0;
  ctx->saved_data["has_bias"] = bias.has_value();
  // W is a temporary: it is freed when forward returns.
  return at::linear(x, dequantize_4bit(weight, x.scalar_type()), bias);
}

torch::autograd::variable_list Linear4bitFunction::backward(torch::autograd::AutogradContext* ctx,
                                                            torch::autograd::variable_list grad_out) {
  const auto saved = ctx->get_saved_variables();  // throws if a packed tensor was overwritten
  const auto& g = grad_out[0];                    // [..., out]
  at::Tensor grad_x, grad_bias;
  if (ctx->needs_input_grad(0)) {
    grad_x = at::matmul(g, dequantize_4bit(packed_from_saved(*ctx, saved, 0), g.scalar_type()));
  }
  if (ctx->saved_data.at("has_bias").toBool() && ctx->needs_input_grad(1)) {
    grad_bias = g.reshape({-1, g.size(-1)}).sum(0);
  }
  return {grad_x, grad_bias, at::Tensor()};
}

at::Tensor linear_4bit(const at::Tensor& x, const Packed4bit& weight, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(
      weight.shape.size() == 2, "linear_4bit: weight must be 2-D [out, in], got shape ", at::IntArrayRef(weight.shape));
  weight.validate("linear_4bit: weight");
  check_linear_args(x, weight.shape[0], weight.shape[1], bias, "linear_4bit");
  return Linear4bitFunction::apply(x, defined_or_none(bias), weight);
}

}  // namespace qtrain::ops
