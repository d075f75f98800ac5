// The sparse MLP of a Qwen3-MoE or Mixtral decoder layer (Qwen3MoeSparseMoeBlock,
// MixtralSparseMoeBlock): a frozen dense router [E, H] that picks top-k experts per token (Note
// [Top-k routing]) and the experts that compute on the rows routed to them (Note [Grouped expert
// compute]). Its input is the post-attention-normed hidden state, as the dense MLP's would be.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/model/model_config.h"
#include "engine/model/moe_experts.h"

namespace qtrain::engine::model {

struct MoeBlock {
  at::Tensor router;  // [E, H] in the compute dtype; never quantized, never trained
  MoeExperts experts;

  // x: [B, T, H] -> [B, T, H]. `router_logits`, when given, receives this call's router logits
  // [B*T, E] (output_router_logits).
  at::Tensor forward(const at::Tensor& x,
                     const MoeConfig& config,
                     bool training,
                     std::vector<at::Tensor>* router_logits) const;
};

}  // namespace qtrain::engine::model
