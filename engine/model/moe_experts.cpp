// See moe_experts.h and Note [Grouped expert compute] there.
#include "engine/model/moe_experts.h"

#include <ATen/ATen.h>

namespace qtrain::engine::model {
namespace {

// Rows per expert of the sorted expert ids, on the CPU (one host sync per layer).
std::vector<int64_t> rows_per_expert(const at::Tensor& sorted_experts, int64_t num_experts) {
  const auto counts = at::bincount(sorted_experts, /*weights=*/{}, num_experts).cpu();
  return {counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts};
}

}  // namespace

at::Tensor MoeExperts::forward(const at::Tensor& x, const Routing& routing, bool training) const {
  const int64_t t = x.size(0), k = routing.experts.size(1), e_count = num_experts();
  TORCH_CHECK(x.dim() == 2 && x.size(1) == hidden_size() && routing.experts.size(0) == t &&
                  routing.weights.sizes() == routing.experts.sizes(),
              name,
              ": experts got x ",
              x.sizes(),
              " and a routing of ",
              routing.experts.sizes(),
              "; they must be [T, ",
              hidden_size(),
              "] and [T, K]");
  auto [sorted, perm] = at::sort(routing.experts.reshape({-1}));
  const auto rows = x.index_select(0, at::floor_divide(perm, k));  // [T*K, H], grouped by expert
  const auto counts = rows_per_expert(sorted, e_count);
  // One split (and one unbind per LoRA tensor): their backward assembles the experts' gradients
  // in one go, where a slice per expert would add E zero-filled [T*K, H] tensors.
  const auto blocks = rows.split_with_sizes(counts);
  const auto gate_up_loras = gate_up_lora ? gate_up_lora->experts() : std::vector<lora::LoraAdapter>{};
  const auto down_loras = down_lora ? down_lora->experts() : std::vector<lora::LoraAdapter>{};
  std::vector<at::Tensor> outputs;
  for (int64_t e = 0; e < e_count; ++e) {
    if (counts[e] == 0) continue;
    const auto& block = blocks[e];
    auto gu = gate_up[e].forward(block, training);
    if (gate_up_lora) gu = gu + lora::lora_delta(block, gate_up_loras[e], training);
    const auto parts = gu.chunk(2, -1);
    const auto g = act == Activation::gelu_tanh ? at::gelu(parts[0], "tanh") : at::silu(parts[0]);
    const auto h = g * parts[1];
    auto y = down[e].forward(h, training);
    if (down_lora) y = y + lora::lora_delta(h, down_loras[e], training);
    outputs.push_back(y);
  }
  // Weighted rows back in (token, slot) order, then the K slots summed (see the Note).
  const auto weighted = at::cat(outputs) * routing.weights.reshape({-1}).index_select(0, perm).unsqueeze(-1);
  const auto inverse = at::empty_like(perm).index_copy_(0, perm, at::arange(perm.size(0), perm.options()));
  return weighted.index_select(0, inverse).view({t, k, x.size(1)}).sum(1).to(x.scalar_type());
}

}  // namespace qtrain::engine::model
