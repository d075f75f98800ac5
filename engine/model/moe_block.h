// The sparse MLP of a Qwen3-MoE or Mixtral decoder layer (Qwen3MoeSparseMoeBlock,
// MixtralSparseMoeBlock): a frozen dense router [E, H] that picks top-k experts per token (Note
// [Top-k routing]) and the experts that compute on the rows routed to them (Note [Grouped expert
// compute]). Its input is the post-attention-normed hidden state, as the dense MLP's would be.
// Gemma 4's block (Gemma4TextRouter + Gemma4TextExperts) holds its own router instead and is run
// by DecoderLayer::forward beside the dense MLP (Note [Gemma 4 decoder]).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"
#include "engine/model/gemma4_router.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_experts.h"

namespace qtrain::engine::model {

// Note [Router LoRA]
// peft adapts a router in one of two ways, and qtrain reads and writes both:
//   - Gemma 4's router.proj is an nn.Linear, so it is a target module like any other (peft's
//     all-linear includes it): logits += scaling * B A dropout(z) on the router's normed input z,
//     saved under "<layer>.router.proj".
//   - Qwen3-MoE's and Mixtral's routers are modules holding a weight [E, H]; target_parameters
//     "gate.weight" (which peft's all-linear adds on these families) wraps it in a ParamWrapper
//     that merges scaling * B @ A into the weight on every forward. Saved under "<layer>.mlp.gate"
//     with A [r, H] and B [E, r]; rank_pattern and alpha_pattern match "<layer>.mlp.gate.weight";
//     no dropout (peft refuses it on parameters).
// qtrain adds both unmerged, logits = x W^T + scaling * B (A x), through lora_delta (Note [LoRA
// numerics]): equal to peft's in float32 up to rounding; in bf16 peft rounds the merged weight
// (ParamWrapper) or adds the delta in float32 (router.proj), one rounding apart. The adapted
// logits choose the experts, and the adapter's gradient flows through the routing weights only
// (the top-k indices have none).
struct MoeBlock {
  at::Tensor router;                             // [E, H] in the compute dtype; never quantized
  std::optional<Gemma4Router> gemma4_router;     // Gemma 4: in place of `router`; never quantized
  std::string router_module;                     // its PEFT module path, "model.layers.N.mlp.gate" / ".router.proj"
  std::string router_stored;                     // the name its weight is stored under in the base folder
  std::optional<lora::LoraAdapter> router_lora;  // A [r, H], B [E, r]: Note [Router LoRA]
  MoeExperts experts;

  // x: [B, T, H] -> [B, T, H]. `router_logits`, when given, receives this call's router logits
  // [B*T, E] (output_router_logits).
  at::Tensor forward(const at::Tensor& x,
                     const MoeConfig& config,
                     bool training,
                     std::vector<at::Tensor>* router_logits) const;
};

// What names the router at `module` ("model.layers.N." + config.router_path) in a LoRA config
// (Note [Router LoRA]): the module itself (Gemma 4's router.proj) or its parameter
// "<module>.weight". rank_pattern and alpha_pattern match this path.
std::string router_lora_path(const MoeConfig& config, const std::string& module);

// Whether `lora` adapts that router: through target_modules (Gemma 4) or target_parameters.
bool targets_router(const lora::LoraConfig& lora, const MoeConfig& config, const std::string& module);

}  // namespace qtrain::engine::model
