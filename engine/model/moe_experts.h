// The routed experts of a mixture-of-experts block: per expert a frozen gate_up weight [2I, H]
// and down weight [H, I], each a LinearLayer (so each expert is quantized on its own, with the
// existing 4-bit and int8 autograd paths that keep only the packed weight for backward), and
// optional LoRA on each of the two stacked parameters in PEFT's layout (engine/lora/expert_lora.h).
// See Note [Grouped expert compute].
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/lora/expert_lora.h"
#include "engine/model/linear_layer.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_router.h"

namespace qtrain::engine::model {

// Note [Grouped expert compute]
// As transformers' default expert kernel (integrations/moe.py: grouped_mm_experts_forward):
//   1. the T*K (token, slot) pairs are sorted by expert and the token rows gathered in that
//      order, so each expert's rows are one contiguous block;
//   2. each expert that received rows (and only those: a layer never touches the weights of an
//      expert no token chose) computes down(act(gate) * up) on its block, where [gate; up] =
//      gate_up(x) (rows 0..I-1 are gate, I..2I-1 up), with its LoRA added unmerged;
//   3. each row is multiplied by its routing weight, the rows go back to (token, slot) order,
//      and the K slots of a token are summed: in float32 when the weights are float32
//      (Mixtral), in the compute dtype otherwise (Qwen), then cast to the compute dtype once.
// The result is differentiable in x (through the gathered rows and the routing weights) and in
// the LoRA tensors; the frozen expert weights are never copied or dequantized for backward.
// Step 2 runs as one matrix product per expert (ExpertKernel::per_expert), or as grouped
// products over all experts at once (ExpertKernel::grouped, Note [Grouped expert GEMM]: the base
// weights in chunks through one workspace, the expert LoRA as two grouped products of the
// touched experts' A and B); the two agree to float rounding.

// Which kernel applies the experts to their rows. automatic: grouped on CUDA (where bfloat16 on
// Hopper and data-centre Blackwell is one CUTLASS kernel) when the experts and their LoRA can be
// grouped, per expert otherwise; on the CPU a grouped product is a loop over the groups anyway.
enum class ExpertKernel { automatic, per_expert, grouped };

struct MoeExperts {
  std::string name;                  // module path, e.g. "model.layers.0.mlp.experts"
  std::vector<LinearLayer> gate_up;  // per expert: [2I, H]
  std::vector<LinearLayer> down;     // per expert: [H, I]
  std::optional<lora::ExpertLora> gate_up_lora, down_lora;
  Activation act = Activation::silu;
  ExpertKernel kernel = ExpertKernel::automatic;

  int64_t num_experts() const { return static_cast<int64_t>(gate_up.size()); }
  int64_t hidden_size() const { return gate_up.at(0).in_features; }
  int64_t intermediate_size() const { return down.at(0).in_features; }

  // x: [T, H] in the compute dtype -> [T, H] in x's dtype.
  at::Tensor forward(const at::Tensor& x, const Routing& routing, bool training) const;
  // Whether the grouped kernel can take these experts, their LoRA and inputs of `dtype` (no
  // LLM.int8 products, every width and the LoRA rank 16-byte aligned), and whether `kernel`
  // picks it for inputs on `device`. A forced ExpertKernel::grouped that cannot be grouped is an
  // error.
  bool groupable(at::ScalarType dtype) const;
  bool uses_grouped_kernel(const at::Device& device, at::ScalarType dtype) const;
};

}  // namespace qtrain::engine::model
