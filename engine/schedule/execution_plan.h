// What the scheduler does with each decoder layer in a step: whether the step trains, and which
// layers are checkpointed (their activations dropped after forward and recomputed in backward).
// A plan is only made by LayerScheduler::prepare_training / prepare_eval, so the order "train
// mode first, then checkpoints" cannot be got wrong (the failure of calling transformers'
// gradient_checkpointing_enable() before train()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qtrain::engine::schedule {

enum class CheckpointPolicy : uint8_t { none, every_layer, every_kth };

// "none", "every_layer" / "true", "every_kth"; anything else is an error naming the values.
CheckpointPolicy checkpoint_policy_from_name(const std::string& name);

class ExecutionPlan {
 public:
  bool training() const { return training_; }
  bool checkpointed(int64_t layer) const { return checkpoint_.at(layer); }
  int64_t num_layers() const { return static_cast<int64_t>(checkpoint_.size()); }
  int64_t num_checkpointed() const;

 private:
  friend class LayerScheduler;
  ExecutionPlan(bool training, std::vector<bool> checkpoint)
      : training_(training), checkpoint_(std::move(checkpoint)) {}
  bool training_;
  std::vector<bool> checkpoint_;
};

}  // namespace qtrain::engine::schedule
