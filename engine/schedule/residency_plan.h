// Where a run keeps each decoder layer's base weights and its checkpointed input, and how far
// ahead they move: decided once, before the model is loaded (engine/train/device_plan.cpp turns
// the memory planner's choice into one), and read by everything that moves them: the loader
// (which layers load into host memory), the sharded base, the streamed weights' slots, offloaded
// activations and the scheduler (a layer whose weights leave the device is recomputed).
#pragma once

#include <cstdint>
#include <vector>

namespace qtrain::engine::schedule {

// Where a layer's quantized base weights wait while it does not compute.
enum class WeightHome : uint8_t {
  device,      // on the compute device for the whole run
  host,        // in (pinned) host memory, copied into a device slot for each use
  shard,       // this rank's slice on the device, the whole layer gathered into a slot for each use
  host_shard,  // this rank's slice in host memory, gathered from there
};

struct ResidencyRequest {
  std::vector<int64_t> host_layers;  // base weights (or their shards) in host memory
  bool shard_base = false;           // each rank keeps 1/world_size of every layer's base weights
  int64_t prefetch_depth = 1;        // layers copied or gathered ahead of the compute
  bool offload_activations = false;  // checkpointed layers' inputs wait in host memory
};

class ResidencyPlan {
 public:
  // Every layer on the device, activations too.
  explicit ResidencyPlan(int64_t num_layers = 0) : ResidencyPlan(num_layers, ResidencyRequest{}) {}
  // Errors, naming the value, on a host layer out of range or listed twice, or a prefetch depth
  // below 1.
  ResidencyPlan(int64_t num_layers, const ResidencyRequest& request);

  int64_t num_layers() const { return static_cast<int64_t>(homes_.size()); }
  WeightHome weights(int64_t layer) const { return homes_.at(layer); }
  // The layer's weights pass through a device slot, so they leave the device between its forward
  // and its backward: it must be checkpointed.
  bool streamed(int64_t layer) const { return weights(layer) != WeightHome::device; }
  std::vector<int64_t> streamed_layers() const;  // ascending
  std::vector<int64_t> host_layers() const;      // ascending
  bool shard_base() const { return shard_base_; }
  int64_t prefetch_depth() const { return prefetch_depth_; }
  // Device slots the streamed layers pass through (offload::slots_for).
  int64_t weight_slots() const;
  bool offload_activations() const { return offload_activations_; }

 private:
  std::vector<WeightHome> homes_;
  bool shard_base_ = false;
  int64_t prefetch_depth_ = 1;
  bool offload_activations_ = false;
};

}  // namespace qtrain::engine::schedule
