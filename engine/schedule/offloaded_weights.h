// Weight offload: the plan's host layers (ResidencyPlan::host_layers, without a sharded base)
// move their quantized base weights into a host store of the copy engine (pinned memory on a
// GPU) and free their device copies; they then stream through device slots (streamed_weights.h).
#pragma once

#include <memory>

#include "engine/model/causal_lm.h"
#include "engine/schedule/residency_plan.h"
#include "engine/schedule/streamed_weights.h"
#include "offload/copy_engine.h"

namespace qtrain::engine::schedule {

// Errors when the plan has no host layer or shards the base (a sharded base keeps its host
// slices itself: engine/dist/sharded_base.h). The model must outlive the result.
std::shared_ptr<StreamedWeights> offload_to_host(model::CausalLM& model,
                                                 const ResidencyPlan& plan,
                                                 std::shared_ptr<offload::CopyEngine> engine);

}  // namespace qtrain::engine::schedule
