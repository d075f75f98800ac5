// See gemma4_router.h.
#include "engine/model/gemma4_router.h"

#include <cmath>

#include <ATen/ATen.h>

#include "ops/nn/rms_norm.h"

namespace qtrain::engine::model {

Routing gemma4_route(const Gemma4Router& r, const at::Tensor& x, const lora::LoraAdapter* adapter, bool training) {
  TORCH_CHECK(x.dim() == 2 && r.proj.dim() == 2 && x.size(1) == r.proj.size(1),
              "gemma4_route: x must be [tokens, ",
              r.proj.size(1),
              "] for a router proj of ",
              r.proj.sizes(),
              ", got ",
              x.sizes());
  TORCH_CHECK(r.top_k > 0 && r.top_k <= r.proj.size(0),
              "gemma4_route: top_k_experts is ",
              r.top_k,
              "; it must be between 1 and num_experts ",
              r.proj.size(0));
  const auto dtype = x.scalar_type();
  const double root = 1.0 / std::sqrt(static_cast<double>(x.size(1)));
  // The order of transformers' ops, each in x's dtype: (rms(x) * scale) * H^-0.5, then proj.
  const auto z = ops::gemma4_rms_norm(x, at::Tensor(), r.eps) * r.scale.to(dtype) * root;
  const auto proj = r.proj.to(dtype);
  auto logits = at::matmul(z, proj.t());
  if (adapter != nullptr && adapter->magnitude.defined()) {
    logits = lora::dora_output(z, logits, proj, std::nullopt, *adapter, training);
  } else if (adapter != nullptr) {
    logits = logits + lora::lora_delta(z, *adapter, training);
  }
  auto probs = at::softmax(logits, -1, at::kFloat);
  auto [weights, experts] = at::topk(probs, r.top_k, -1);
  weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights * r.per_expert_scale.index_select(0, experts.reshape(-1)).view_as(experts);
  return {probs, weights, experts};
}

}  // namespace qtrain::engine::model
