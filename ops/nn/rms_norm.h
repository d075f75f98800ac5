// RMSNorm in the two conventions of the supported families. The Llama family (Llama, Mistral,
// Qwen2, Qwen3 and their q/k norms) normalises in float32, casts back to the input dtype, then
// multiplies by the weight. Gemma 2 and 3 (every norm, q/k norms included) scale by (1 + weight)
// in float32 and cast last; their weights are stored centred on 0 (transformers' Gemma2RMSNorm:
// "Llama does x.to(float16) * w whilst Gemma2 is (x * w).to(float16)"). Gemma 4 scales by the
// weight itself (initialised to ones), also in float32 and cast last, with pow(ms + eps, -0.5)
// instead of rsqrt, and some of its norms have no weight (Gemma4RMSNorm, with_scale=False).
#pragma once

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

// x: [..., d]; weight: [d]. Returns weight * (x / rms(x)) in x's dtype (weight cast to x's dtype).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x: [..., d]; weight: [d]. Returns ((x / rms(x)) * (1 + weight)) computed in float32, cast to
// x's dtype.
at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x: [..., d]; weight: [d] or undefined (no weight). Returns (x * pow(mean(x^2) + eps, -0.5) *
// weight) computed in float32, cast to x's dtype.
at::Tensor gemma4_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace qtrain::ops
