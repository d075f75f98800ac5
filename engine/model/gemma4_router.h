// Gemma 4's expert router (transformers' Gemma4TextRouter, modeling_gemma4.py): which K of the E
// experts each token goes to, and with which weights. See Note [Gemma 4 router].
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "engine/lora/lora_linear.h"
#include "engine/model/moe_router.h"

namespace qtrain::engine::model {

// Note [Gemma 4 router]
// The router reads the raw residual stream after attention, x (not a normed copy: the experts
// get pre_feedforward_layernorm_2(x)):
//   z      = rms(x) * scale * H^-0.5                  weightless RMSNorm; in x's dtype
//   p      = softmax(z @ proj^T) in float32          [N, E]   (+ LoRA on proj: Note [Router LoRA])
//   w, idx = topk(p, K)                               sorted descending
//   w      = w / sum_K(w) * per_expert_scale[idx]     float32
// No bias, no noise, no load-balancing loss (transformers adds none for Gemma 4). Gradients flow
// through w into x, and into proj, scale and per_expert_scale when those train: with a frozen
// router the LoRA gradients of earlier layers still depend on this path. idx has none.
// proj stays unquantized: top-k is discontinuous, and a 4-bit router picks other experts for
// many tokens (transformers PR #48801 keeps it in full precision for that reason); it is
// 360k parameters a layer on the 26B-A4B.
struct Gemma4Router {
  at::Tensor proj;              // [E, H]
  at::Tensor scale;             // [H]
  at::Tensor per_expert_scale;  // [E]
  int64_t top_k = 0;
  double eps = 1e-6;
};

// x: [N, H] in the compute dtype. The result's `logits` are the float32 probabilities [N, E]
// (softmax over all experts): what transformers records as Gemma 4's router_logits; weights are
// float32 [N, K], experts int64 [N, K]. `adapter`, when not null, is LoRA on proj, its dropout
// applied when `training`.
Routing gemma4_route(const Gemma4Router& router,
                     const at::Tensor& x,
                     const lora::LoraAdapter* adapter = nullptr,
                     bool training = false);

}  // namespace qtrain::engine::model
