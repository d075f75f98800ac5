// Argument checks shared by the quantized linear ops, so that every one rejects bad input with
// the same message.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace qtrain::ops {

// x: [..., in] float32/bf16/fp16; bias: [out] or none.
inline void check_linear_args(const at::Tensor& x,
                              int64_t out_features,
                              int64_t in_features,
                              const std::optional<at::Tensor>& bias,
                              const char* op) {
  TORCH_CHECK(x.defined() && x.dim() >= 1, op, ": x must have at least one dimension");
  const auto t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
              op,
              ": x has dtype ",
              t,
              "; accepted: float32, bfloat16, float16");
  TORCH_CHECK(x.size(-1) == in_features,
              op,
              ": x has ",
              x.size(-1),
              " input features but the weight [",
              out_features,
              ", ",
              in_features,
              "] expects ",
              in_features);
  if (bias && bias->defined()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == out_features,
                op,
                ": bias must be [",
                out_features,
                "], got ",
                bias->sizes());
  }
}

// An undefined tensor inside the optional becomes no bias.
inline std::optional<at::Tensor> defined_or_none(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? t : std::nullopt;
}

}  // namespace qtrain::ops
