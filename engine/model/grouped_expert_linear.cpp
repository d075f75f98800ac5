// See grouped_expert_linear.h and Note [Grouped expert GEMM] there.
#include "engine/model/grouped_expert_linear.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include "ops/host_read.h"

namespace qtrain::engine::model {
namespace {

// forward: y = x W_e^T per block; backward: grad_x = grad_y W_e per block.
enum class Product { forward, backward };

// Applies the experts to their blocks of `x`, chunk by chunk (see the Note).
at::Tensor apply_chunks(const at::Tensor& x,
                        const std::vector<LinearLayer>& experts,
                        const std::vector<int64_t>& counts,
                        int64_t workspace_bytes,
                        Product product) {
  const int64_t out = experts.front().out_features, in = experts.front().in_features;
  const int64_t expert_bytes = out * in * static_cast<int64_t>(c10::elementSize(x.scalar_type()));
  const auto per_chunk = static_cast<size_t>(std::max<int64_t>(1, workspace_bytes / expert_bytes));
  std::vector<at::Tensor> outputs;
  int64_t row = 0;
  for (size_t begin = 0; begin < experts.size(); begin += per_chunk) {
    const size_t end = std::min(experts.size(), begin + per_chunk);
    auto workspace = at::empty({static_cast<int64_t>(end - begin), out, in}, x.options());
    std::vector<int32_t> ends;
    int64_t rows = 0;
    for (size_t e = begin; e < end; ++e) {
      auto slot = workspace[static_cast<int64_t>(e - begin)];
      if (const auto* q4 = std::get_if<ops::Packed4bit>(&experts[e].weight)) {
        ops::dequantize_4bit_into(*q4, slot);
      } else if (const auto* w8 = std::get_if<ops::Int8Weight>(&experts[e].weight)) {
        slot.copy_(w8->dequantize(x.scalar_type()));  // what linear_int8's dequantize mode multiplies by
      } else {
        slot.copy_(std::get<at::Tensor>(experts[e].weight));
      }
      rows += counts[e];
      ends.push_back(static_cast<int32_t>(rows));
    }
    // Host data: through pinned memory without a host synchronization (Note [Host reads]).
    const auto offsets = ops::to_device_async(at::tensor(ends, at::TensorOptions().dtype(at::kInt)), x.device());
    const auto block = x.narrow(0, row, rows);
    outputs.push_back(
        at::_grouped_mm(block, product == Product::forward ? workspace.transpose(1, 2) : workspace, offsets));
    row += rows;
  }
  return outputs.size() == 1 ? outputs.front() : at::cat(outputs);
}

// The backward node: the experts' layers as forward used them (their weight handles), and their
// stored tensors as SavedVariables, whose unpacking fails if anything wrote to them in place.
struct GroupedExpertLinearBackward : torch::autograd::Node {
  std::vector<LinearLayer> experts;
  std::vector<int64_t> counts;
  int64_t workspace_bytes = 0;
  std::vector<torch::autograd::SavedVariable> stored;

  std::string name() const override { return "GroupedExpertLinearBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    for (const auto& s : stored) s.unpack();  // throws if a stored weight was modified in place
    if (!grads[0].defined()) return {at::Tensor()};
    return {apply_chunks(grads[0].contiguous(), experts, counts, workspace_bytes, Product::backward)};
  }

  void release_variables() override {
    experts.clear();
    stored.clear();
  }
};

}  // namespace

bool groupable(const LinearLayer& layer, at::ScalarType dtype) {
  const auto s = static_cast<int64_t>(c10::elementSize(dtype));
  const bool llm_int8 =
      std::holds_alternative<ops::Int8Weight>(layer.weight) && layer.quant.int8_compute == ops::Int8Compute::llm_int8;
  return !llm_int8 && layer.in_features * s % 16 == 0 && layer.out_features * s % 16 == 0;
}

at::Tensor grouped_expert_linear(const at::Tensor& rows,
                                 const std::vector<int64_t>& counts,
                                 const std::vector<const LinearLayer*>& experts,
                                 int64_t workspace_bytes) {
  TORCH_CHECK(!experts.empty() && counts.size() == experts.size() && rows.dim() == 2,
              "grouped_expert_linear: ",
              experts.size(),
              " experts, ",
              counts.size(),
              " row counts, rows of shape ",
              rows.sizes());
  std::vector<LinearLayer> layers;
  layers.reserve(experts.size());
  int64_t total = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const auto& l = *experts[e];
    TORCH_CHECK(groupable(l, rows.scalar_type()) && l.in_features == rows.size(1) &&
                    l.out_features == experts.front()->out_features && counts[e] > 0,
                l.name,
                ": cannot join a grouped product of [",
                experts.front()->out_features,
                ", ",
                rows.size(1),
                "] experts with ",
                counts[e],
                " rows (LLM.int8 products and widths that are not 16-byte aligned take the per-expert path)");
    layers.push_back(l);
    total += counts[e];
  }
  TORCH_CHECK(
      total == rows.size(0), "grouped_expert_linear: the counts sum to ", total, ", not ", rows.size(0), " rows");

  at::Tensor y;
  {
    at::NoGradGuard no_grad;
    y = apply_chunks(rows.contiguous(), layers, counts, workspace_bytes, Product::forward);
  }
  if (torch::autograd::compute_requires_grad(rows)) {
    auto node = std::make_shared<GroupedExpertLinearBackward>();
    node->set_next_edges(torch::autograd::collect_next_edges(rows));
    for (const auto& l : layers) {
      for (const auto& t : l.base_tensors()) node->stored.emplace_back(t, /*is_output=*/false);
    }
    node->experts = std::move(layers);
    node->counts = counts;
    node->workspace_bytes = workspace_bytes;
    torch::autograd::set_history(y, node);
  }
  return y;
}

}  // namespace qtrain::engine::model
