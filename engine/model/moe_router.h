// Top-k softmax routing of a mixture-of-experts block (Qwen3-MoE, Mixtral): which experts each
// token goes to and with what weight. The result is a plain value (Routing) that the expert
// computation (engine/model/moe_experts.h) takes, so a family with another router (Gemma 4's:
// normed input, scale, per-expert scale) supplies its own function producing the same value.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "engine/lora/lora_linear.h"

namespace qtrain::engine::model {

// Note [Top-k routing]
// transformers 5.23's Qwen3MoeTopKRouter and MixtralTopKRouter (modeling_qwen3_moe.py,
// modeling_mixtral.py), for x [T, H] in the compute dtype and the router weight W [E, H]:
//     logits = x W^T                                  [T, E], compute dtype, no bias
//     p      = softmax(logits in float32)             [T, E], float32
//     w, idx = topk(p, K)                             sorted descending, ties to the lower index
//     w      = w / sum(w)                             Mixtral always; Qwen only if norm_topk_prob
//     w      = w.to(compute dtype)                    Qwen only; Mixtral keeps float32
// The router weight is frozen, but the routing is differentiable in x through w (idx carries no
// gradient): the backward must pass through the router into the residual stream, or the LoRA
// gradients of earlier layers are wrong. A LoRA adapter on the router (Note [Router LoRA] in
// engine/model/moe_block.h) adds scaling * B (A x) to the logits before the softmax.
struct Routing {
  at::Tensor logits;   // [T, E] compute dtype: what output_router_logits records (the aux loss input)
  at::Tensor weights;  // [T, K] float32 or the compute dtype, differentiable in x
  at::Tensor experts;  // int64 [T, K]
};

// `adapter`, when not null, is the router's LoRA (no dropout: peft allows none on a parameter).
Routing route_top_k(const at::Tensor& x,
                    const at::Tensor& router_weight,
                    const lora::LoraAdapter* adapter,
                    int64_t top_k,
                    bool normalize,
                    bool fp32_weights);

}  // namespace qtrain::engine::model
