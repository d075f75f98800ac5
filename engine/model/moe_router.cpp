// See moe_router.h and Note [Top-k routing] there.
#include "engine/model/moe_router.h"

#include <ATen/ATen.h>

namespace qtrain::engine::model {

Routing route_top_k(const at::Tensor& x,
                    const at::Tensor& router_weight,
                    const lora::LoraAdapter* adapter,
                    int64_t top_k,
                    bool normalize,
                    bool fp32_weights) {
  TORCH_CHECK(x.dim() == 2 && router_weight.dim() == 2 && x.size(1) == router_weight.size(1),
              "route_top_k: x is ",
              x.sizes(),
              " and the router weight ",
              router_weight.sizes(),
              "; they must be [T, H] and [E, H]");
  TORCH_CHECK(top_k > 0 && top_k <= router_weight.size(0),
              "route_top_k: top_k ",
              top_k,
              " must be between 1 and the number of experts ",
              router_weight.size(0));
  Routing r;
  r.logits = at::linear(x, router_weight);
  if (adapter != nullptr) r.logits = r.logits + lora::lora_delta(x, *adapter, /*training=*/false);
  const auto probs = at::softmax(r.logits, -1, at::kFloat);
  auto [w, idx] = at::topk(probs, top_k, -1);
  if (normalize) w = w / w.sum(-1, /*keepdim=*/true);
  r.weights = fp32_weights ? w : w.to(x.scalar_type());
  r.experts = idx;
  return r;
}

}  // namespace qtrain::engine::model
