// See load_balancing.h and Note [Load-balancing loss] there.
#include "engine/model/load_balancing.h"

#include <ATen/ATen.h>

namespace qtrain::engine::model {

RouterLoad router_load(const at::Tensor& logits, const at::Tensor& token_weights, int64_t top_k) {
  TORCH_CHECK(logits.dim() == 2 && token_weights.dim() == 1 && token_weights.size(0) == logits.size(0),
              "router_load: logits ",
              logits.sizes(),
              " and token weights ",
              token_weights.sizes(),
              " must be [N, E] and [N]");
  // As transformers: softmax in the logits' dtype (not float32 as the routing's), top-k of that.
  const auto probs = at::softmax(logits, -1);
  const auto chosen = std::get<1>(at::topk(probs, top_k, -1));
  const auto w = token_weights.to(at::kFloat);
  RouterLoad load;
  load.counts =
      at::zeros({logits.size(1)}, w.options()).scatter_add_(0, chosen.reshape(-1), w.repeat_interleave(top_k)).detach();
  load.prob_sum = (probs.to(at::kFloat) * w.unsqueeze(-1)).sum(0);
  return load;
}

at::Tensor load_balancing_loss(const std::vector<RouterLoad>& layers, const at::Tensor& token_weights) {
  TORCH_CHECK(!layers.empty(), "load_balancing_loss: no sparse layer recorded its router");
  const int64_t experts = layers.front().prob_sum.size(0);
  // Summed layer by layer from zero, as transformers sums them.
  auto counts = at::zeros({experts}, layers.front().prob_sum.options());
  auto probs = counts.clone();
  auto rows = at::zeros({}, counts.options());
  for (const auto& l : layers) {
    counts = counts + l.counts;
    probs = probs + l.prob_sum;
    rows = rows + token_weights.to(at::kFloat).sum();
  }
  return (counts / rows * (probs / rows)).sum() * static_cast<double>(experts);
}

}  // namespace qtrain::engine::model
