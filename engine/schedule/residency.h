// The seam through which a layer's weights become usable on the compute device. The scheduler
// calls acquire(i) before layer i computes (in forward, and again before its recompute in
// backward) and release(i) after. Resident weights need nothing; offloaded layers (offload/)
// and sharded layers (engine/dist) will copy or gather into device slots here.
#pragma once

#include <cstdint>

namespace qtrain::engine::schedule {

class WeightResidency {
 public:
  virtual ~WeightResidency() = default;
  virtual void acquire(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
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
