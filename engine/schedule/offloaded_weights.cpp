// See offloaded_weights.h.
#include "engine/schedule/offloaded_weights.h"

#include <ATen/ATen.h>

#include "engine/model/base_tensors.h"
#include "offload/host_store.h"

namespace qtrain::engine::schedule {

std::shared_ptr<StreamedWeights> offload_to_host(model::CausalLM& model,
                                                 const ResidencyPlan& plan,
                                                 std::shared_ptr<offload::CopyEngine> engine) {
  TORCH_CHECK(!plan.shard_base(), "a sharded base keeps its offloaded layers itself (engine/dist/sharded_base.h)");
  TORCH_CHECK(!plan.host_layers().empty(), "no layers to offload");
  auto store = std::make_shared<offload::HostStore>(std::move(engine));
  at::NoGradGuard no_grad;
  // The device copies go as each layer is bound to its host copy (StreamedWeights' constructor).
  for (const int64_t l : plan.host_layers()) store->add(l, model::layer_base_tensors(model.layers()[l]));
  return std::make_shared<StreamedWeights>(model, plan, std::move(store));
}

}  // namespace qtrain::engine::schedule
