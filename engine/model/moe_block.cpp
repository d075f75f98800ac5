// See moe_block.h.
#include "engine/model/moe_block.h"

#include <ATen/ATen.h>

#include "engine/lora/adapters_off.h"

namespace qtrain::engine::model {

at::Tensor MoeBlock::forward(const at::Tensor& x,
                             const MoeConfig& config,
                             bool training,
                             std::vector<at::Tensor>* router_logits) const {
  const auto flat = x.reshape({-1, x.size(-1)});
  const auto routing = route_top_k(flat,
                                   router,
                                   router_lora && lora::adapters_on() ? &*router_lora : nullptr,  // Note [Adapters off]
                                   config.top_k,
                                   config.norm_topk_prob,
                                   config.fp32_routing_weights);
  if (router_logits != nullptr) router_logits->push_back(routing.logits);
  return experts.forward(flat, routing, training).view(x.sizes());
}

std::string router_lora_path(const MoeConfig& config, const std::string& module) {
  return config.router_is_linear ? module : module + ".weight";
}

bool targets_router(const lora::LoraConfig& lora, const MoeConfig& config, const std::string& module) {
  const auto path = router_lora_path(config, module);
  return config.router_is_linear ? lora.targets(path) : lora.targets_parameter(path);
}

}  // namespace qtrain::engine::model
