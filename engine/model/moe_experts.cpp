// See moe_experts.h and Note [Grouped expert compute] there.
#include "engine/model/moe_experts.h"

#include <ATen/ATen.h>

#include "engine/lora/adapters_off.h"
#include "engine/model/grouped_expert_linear.h"
#include "ops/host_read.h"

namespace qtrain::engine::model {
namespace {

// Rows per expert of the sorted expert ids, on the CPU (one host sync per layer).
std::vector<int64_t> rows_per_expert(const at::Tensor& sorted_experts, int64_t num_experts) {
  const auto counts =
      ops::read_to_host(at::bincount(sorted_experts, /*weights=*/{}, num_experts), "experts: rows per expert");
  return {counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts};
}

at::Tensor activate(const at::Tensor& gate_up, Activation act) {
  const auto parts = gate_up.chunk(2, -1);
  const auto g = act == Activation::gelu_tanh ? at::gelu(parts[0], "tanh") : at::silu(parts[0]);
  return g * parts[1];
}

// Step 2 one expert at a time: each expert that received rows, on its block.
at::Tensor per_expert_outputs(const MoeExperts& ex,
                              const at::Tensor& rows,
                              const std::vector<int64_t>& counts,
                              bool training) {
  // One split (and one unbind per LoRA tensor): their backward assembles the experts' gradients
  // in one go, where a slice per expert would add E zero-filled [T*K, H] tensors.
  const auto blocks = rows.split_with_sizes(counts);
  const bool on = lora::adapters_on();  // Note [Adapters off]
  const auto gate_up_loras = ex.gate_up_lora ? ex.gate_up_lora->experts() : std::vector<lora::LoraAdapter>{};
  const auto down_loras = ex.down_lora ? ex.down_lora->experts() : std::vector<lora::LoraAdapter>{};
  std::vector<at::Tensor> outputs;
  for (int64_t e = 0; e < ex.num_experts(); ++e) {
    if (counts[e] == 0) continue;
    const auto& block = blocks[e];
    auto gu = ex.gate_up[e].forward(block, training);
    if (on && ex.gate_up_lora) gu = gu + lora::lora_delta(block, gate_up_loras[e], training);
    const auto h = activate(gu, ex.act);
    auto y = ex.down[e].forward(h, training);
    if (on && ex.down_lora) y = y + lora::lora_delta(h, down_loras[e], training);
    outputs.push_back(y);
  }
  return at::cat(outputs);
}

// scaling * B_e (A_e x) for each touched expert's block of x, as two grouped products of the
// touched experts' A [G, r, in] and B [G, r, out] (Note [Expert LoRA layout]: A's rows are
// expert-major, B's columns expert-minor). Expert LoRA has no dropout (PEFT refuses it).
at::Tensor grouped_lora_delta(const at::Tensor& x,
                              const lora::ExpertLora& l,
                              const at::Tensor& touched,
                              const at::Tensor& offsets) {
  const auto& s = l.stacked;
  const int64_t e = l.num_experts, r = l.rank();
  const auto a = s.a.view({e, r, s.a.size(1)}).index_select(0, touched);
  const auto b = s.b.view({s.b.size(0), r, e}).permute({2, 1, 0}).index_select(0, touched);
  const auto xa = at::_grouped_mm(x.to(s.a.scalar_type()), a.transpose(1, 2), offsets);
  return (at::_grouped_mm(xa, b, offsets) * s.scaling).to(x.scalar_type());
}

// Step 2 as grouped products over the experts that received rows (Note [Grouped expert GEMM]).
at::Tensor grouped_outputs(const MoeExperts& ex, const at::Tensor& rows, const std::vector<int64_t>& counts) {
  std::vector<int64_t> touched, touched_counts;
  std::vector<int32_t> ends;
  std::vector<const LinearLayer*> gate_up, down;
  int64_t end = 0;
  for (int64_t e = 0; e < ex.num_experts(); ++e) {
    if (counts[e] == 0) continue;
    touched.push_back(e);
    touched_counts.push_back(counts[e]);
    end += counts[e];
    ends.push_back(static_cast<int32_t>(end));
    gate_up.push_back(&ex.gate_up[e]);
    down.push_back(&ex.down[e]);
  }
  const bool on = lora::adapters_on();  // Note [Adapters off]
  at::Tensor touched_ids, offsets;
  if (on && (ex.gate_up_lora || ex.down_lora)) {
    // Host data: through pinned memory without a host synchronization (Note [Host reads]).
    touched_ids = ops::to_device_async(at::tensor(touched, at::TensorOptions().dtype(at::kLong)), rows.device());
    offsets = ops::to_device_async(at::tensor(ends, at::TensorOptions().dtype(at::kInt)), rows.device());
  }
  auto gu = grouped_expert_linear(rows, touched_counts, gate_up);
  if (on && ex.gate_up_lora) gu = gu + grouped_lora_delta(rows, *ex.gate_up_lora, touched_ids, offsets);
  const auto h = activate(gu, ex.act);
  auto y = grouped_expert_linear(h, touched_counts, down);
  if (on && ex.down_lora) y = y + grouped_lora_delta(h, *ex.down_lora, touched_ids, offsets);
  return y;
}

}  // namespace

bool MoeExperts::groupable(at::ScalarType dtype) const {
  const auto aligned = [](int64_t n, int64_t bytes) { return n * bytes % 16 == 0; };
  const auto lora_ok = [&](const std::optional<lora::ExpertLora>& l) {
    return !l || aligned(l->rank(), static_cast<int64_t>(c10::elementSize(l->stacked.a.scalar_type())));
  };
  return model::groupable(gate_up.at(0), dtype) && model::groupable(down.at(0), dtype) && lora_ok(gate_up_lora) &&
         lora_ok(down_lora);
}

bool MoeExperts::uses_grouped_kernel(const at::Device& device, at::ScalarType dtype) const {
  switch (kernel) {
    case ExpertKernel::per_expert:
      return false;
    case ExpertKernel::grouped:
      TORCH_CHECK(
          groupable(dtype),
          name,
          ": the grouped expert kernel needs experts without LLM.int8 products (int8_compute: llm_int8) and widths (",
          hidden_size(),
          ", ",
          intermediate_size(),
          ") and a LoRA rank that are multiples of 16 bytes in ",
          dtype,
          "; use the per-expert kernel");
      return true;
    case ExpertKernel::automatic:
      return device.is_cuda() && groupable(dtype);
  }
  return false;
}

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
  // Stable: a token's place in its expert's block, and so the products it joins, do not depend on
  // the threads that sorted (a block's rows can round differently by their place in the GEMM).
  auto [sorted, perm] = at::sort(routing.experts.reshape({-1}), /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const auto rows = x.index_select(0, at::floor_divide(perm, k));  // [T*K, H], grouped by expert
  const auto counts = rows_per_expert(sorted, e_count);
  const auto outputs = uses_grouped_kernel(x.device(), x.scalar_type())
                           ? grouped_outputs(*this, rows, counts)
                           : per_expert_outputs(*this, rows, counts, training);
  // Weighted rows back in (token, slot) order, then the K slots summed (see the Note).
  const auto weighted = outputs * routing.weights.reshape({-1}).index_select(0, perm).unsqueeze(-1);
  const auto inverse = at::empty_like(perm).index_copy_(0, perm, at::arange(perm.size(0), perm.options()));
  return weighted.index_select(0, inverse).view({t, k, x.size(1)}).sum(1).to(x.scalar_type());
}

}  // namespace qtrain::engine::model
