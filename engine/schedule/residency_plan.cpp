// See residency_plan.h.
#include "engine/schedule/residency_plan.h"

#include <c10/util/Exception.h>

#include "offload/prefetch_depth.h"

namespace qtrain::engine::schedule {

ResidencyPlan::ResidencyPlan(int64_t num_layers, const ResidencyRequest& r)
    : homes_(num_layers, r.shard_base ? WeightHome::shard : WeightHome::device),
      shard_base_(r.shard_base),
      prefetch_depth_(r.prefetch_depth),
      offload_activations_(r.offload_activations) {
  offload::check_prefetch_depth(prefetch_depth_);
  for (const int64_t l : r.host_layers) {
    TORCH_CHECK(l >= 0 && l < num_layers, "cannot offload layer ", l, ": the model has layers 0..", num_layers - 1);
    auto& home = homes_[l];
    TORCH_CHECK(
        home == WeightHome::device || home == WeightHome::shard, "layer ", l, " is listed twice for offloading");
    home = r.shard_base ? WeightHome::host_shard : WeightHome::host;
  }
}

std::vector<int64_t> ResidencyPlan::streamed_layers() const {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < num_layers(); ++l) {
    if (streamed(l)) out.push_back(l);
  }
  return out;
}

std::vector<int64_t> ResidencyPlan::host_layers() const {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < num_layers(); ++l) {
    if (homes_[l] == WeightHome::host || homes_[l] == WeightHome::host_shard) out.push_back(l);
  }
  return out;
}

int64_t ResidencyPlan::weight_slots() const {
  return offload::slots_for(static_cast<int64_t>(streamed_layers().size()), prefetch_depth_);
}

}  // namespace qtrain::engine::schedule
