// Residency for the layers a residency plan streams (ResidencyPlan::streamed): their quantized
// base weights rest outside the device (offload's host store, or a sharded base's slices) and
// pass through a ring of plan.weight_slots() device slots, filled up to prefetch_depth streamed
// layers ahead of the compute, following the acquisition order the scheduler announces
// (forward, then the reverse order of the backward recompute). Outside acquire/release a
// streamed layer points at its resting tensors (its host copy, or meta placeholders), so a stray
// use on the GPU fails on the device check instead of reading a slot that holds another layer.
// The same calls make the same fills on every rank, as a sharded base's gathers require.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "engine/model/causal_lm.h"
#include "engine/schedule/residency.h"
#include "engine/schedule/residency_plan.h"
#include "offload/slot_ring.h"
#include "offload/slot_source.h"

namespace qtrain::engine::schedule {

struct StreamStats {
  int64_t streamed_layers = 0;
  int64_t held_bytes = 0;  // what the source keeps: the host store, or this rank's slices
  int64_t slot_bytes = 0;  // one device slot
  int64_t num_slots = 0;
  offload::SlotRingStats ring;  // since construction
  // Acquisitions no fill ahead had prepared: the compute waited for a whole copy or gather.
  int64_t unprepared_acquisitions = 0;
};

class StreamedWeights final : public WeightResidency {
 public:
  // Points the plan's streamed layers at their resting tensors in `source`, which holds them all.
  // The model must outlive this object.
  StreamedWeights(model::CausalLM& model, const ResidencyPlan& plan, std::shared_ptr<offload::SlotSource> source);

  void plan_acquisitions(const std::vector<int64_t>& order) override;
  void acquire(int64_t layer) override;
  void release(int64_t layer) override;
  bool needs_recompute(int64_t layer) const override { return plan_.streamed(layer); }

  StreamStats stats() const;
  // The ring, for tests that force a stale slot.
  offload::SlotRing& ring() { return *ring_; }

 private:
  void prefetch_ahead();

  model::CausalLM& model_;
  ResidencyPlan plan_;
  std::shared_ptr<offload::SlotSource> source_;
  std::unique_ptr<offload::SlotRing> ring_;
  std::vector<int64_t> order_;  // the announced acquisitions, streamed layers only
  size_t cursor_ = 0;           // index in order_ of the next expected acquisition
  int64_t unprepared_ = 0;
  std::map<int64_t, offload::SlotTicket> tickets_;
  std::map<int64_t, offload::SlotLease> leases_;
  // Forward runs on the caller's thread, a CUDA backward on autograd's device thread.
  mutable std::mutex mutex_;
};

}  // namespace qtrain::engine::schedule
