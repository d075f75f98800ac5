// The seam through which a layer's weights become usable on the compute device. The scheduler
// calls acquire(i) before layer i computes (in forward, and again before its recompute in
// backward) and release(i) after. Resident weights need nothing; streamed layers
// (streamed_weights.h: offloaded to host memory, or a sharded base's) are copied or gathered into
// device slots here.
#pragma once

#include <cstdint>
#include <vector>

namespace qtrain::engine::schedule {

class WeightResidency {
 public:
  virtual ~WeightResidency() = default;
  // The layers the coming pass acquires, in order (a training step: every layer forward, then
  // the checkpointed ones in reverse for their recompute), so copies can run ahead of the compute.
  virtual void plan_acquisitions(const std::vector<int64_t>& order) {}
  virtual void acquire(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
  // Whether the layer's weights leave the device between its forward and its backward; such a
  // layer must be checkpointed (recomputed after a fresh acquire), never differentiated through
  // tensors saved from a slot that has been reused since.
  virtual bool needs_recompute(int64_t layer) const { return false; }
};

// Every layer lives on the device for the whole run. Counts calls, so tests and stats can see
// that a recompute re-acquired its layer.
class ResidentWeights final : public WeightResidency {
 public:
  void acquire(int64_t) override { ++acquires_; }
  void release(int64_t) override { ++releases_; }
  int64_t acquires() const { return acquires_; }
  int64_t releases() const { return releases_; }

 private:
  int64_t acquires_ = 0;
  int64_t releases_ = 0;
};

}  // namespace qtrain::engine::schedule
