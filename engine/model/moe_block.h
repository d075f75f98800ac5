// The sparse MLP of a Qwen3-MoE or Mixtral decoder layer (Qwen3MoeSparseMoeBlock,
// MixtralSparseMoeBlock): a frozen dense router [E, H] that picks top-k experts per token (Note
// [Top-k routing]) and the experts that compute on the rows routed to them (Note [Grouped expert
// compute]). Its input is the post-attention-normed hidden state, as the dense MLP's would be.
// Gemma 4's block (Gemma4TextRouter + Gemma4TextExperts) holds its own router instead and is run
// by DecoderLayer::forward beside the dense MLP (Note [Gemma 4 decoder]).
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/model/gemma4_router.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_experts.h"

namespace qtrain::engine::model {

struct MoeBlock {
  at::Tensor router;                          // [E, H] in the compute dtype; never quantized, never trained
  std::optional<Gemma4Router> gemma4_router;  // Gemma 4: in place of `router`; never quantized, never trained
  MoeExperts experts;

  // x: [B, T, H] -> [B, T, H]. `router_logits`, when given, receives this call's router logits
  // [B*T, E] (output_router_logits).
  at::Tensor forward(const at::Tensor& x,
                     const MoeConfig& config,
                     bool training,
                     std::vector<at::Tensor>* router_logits) const;
};

}  // namespace qtrain::engine::model
