// Residency for a model with some layers offloaded: their quantized base weights live in a host
// store (pinned on a GPU) and are copied into a ring of prefetch_depth + 1 device slots (fewer
// when fewer layers are offloaded), up to
// prefetch_depth offloaded layers ahead of the compute, following the acquisition order the
// scheduler announces (forward, then the reverse order of the backward recompute). Outside
// acquire/release an offloaded layer's weights point at its host copy, so the model stays whole
// (merging, saving) and a stray use on the GPU fails on the device check instead of reading a
// slot that holds another layer.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "engine/model/causal_lm.h"
#include "engine/schedule/residency.h"
#include "offload/copy_engine.h"
#include "offload/host_store.h"
#include "offload/slot_ring.h"

namespace qtrain::engine::schedule {

struct OffloadOptions {
  std::vector<int64_t> layers;  // decoder layers whose base weights are offloaded
  int64_t prefetch_depth = 1;   // offloaded layers copied ahead of the compute
};

struct OffloadStats {
  int64_t offloaded_layers = 0;
  int64_t host_bytes = 0;  // the host store
  int64_t slot_bytes = 0;  // one device slot
  int64_t num_slots = 0;
  offload::SlotRingStats ring;  // since construction
  // Acquisitions no prefetch had prepared: the compute waited for a whole copy.
  int64_t unprepared_acquisitions = 0;
};

class OffloadedWeights final : public WeightResidency {
 public:
  // Moves the base weights of options.layers into a host store of `engine` and frees their
  // device copies. The model must outlive this object.
  OffloadedWeights(model::CausalLM& model, const OffloadOptions& options, std::shared_ptr<offload::CopyEngine> engine);

  void plan_acquisitions(const std::vector<int64_t>& order) override;
  void acquire(int64_t layer) override;
  void release(int64_t layer) override;
  bool needs_recompute(int64_t layer) const override { return offloaded_.count(layer) > 0; }

  OffloadStats stats() const;
  // The ring, for tests that force a stale slot.
  offload::SlotRing& ring() { return *ring_; }

 private:
  void bind(int64_t layer, const std::vector<at::Tensor>& tensors);
  void prefetch_ahead();

  model::CausalLM& model_;
  std::set<int64_t> offloaded_;
  int64_t depth_;
  offload::HostStore store_;
  std::unique_ptr<offload::SlotRing> ring_;
  std::vector<int64_t> order_;  // the announced acquisitions, offloaded layers only
  size_t cursor_ = 0;           // index in order_ of the next expected acquisition
  int64_t unprepared_ = 0;
  std::map<int64_t, offload::SlotTicket> tickets_;
  std::map<int64_t, offload::SlotLease> leases_;
  // Forward runs on the caller's thread, a CUDA backward on autograd's device thread.
  mutable std::mutex mutex_;
};

}  // namespace qtrain::engine::schedule
