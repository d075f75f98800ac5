// RMSNorm as the Llama family computes it (Llama, Mistral, Qwen2, Qwen3 and their q/k norms):
// normalise in float32, cast back to the input dtype, then multiply by the weight.
#pragma once

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

// x: [..., d]; weight: [d]. Returns weight * (x / rms(x)) in x's dtype (weight cast to x's dtype).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace qtrain::ops
