// AdamW for the trainable (LoRA) parameters, with its state as named tensors.
//
// qtrain's own optimizer rather than torch::optim::AdamW, for two reasons: its state must go into
// a safetensors run-state file and come back exactly (torch::optim keys state by TensorImpl
// pointer, and 1.13 and 2.x differ), and a step must be bit-identical to the Hugging Face
// Trainer's default optimizer, torch.optim.AdamW on its single-tensor path, so that a qtrain
// run and a Python run with the same gradients produce the same weights. See Note [AdamW op
// order] in adamw.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace qtrain::engine::train {

struct AdamWOptions {
  double lr = 1e-3;  // the base lr; the lr of each update is the argument of AdamW::step
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  // `params`: float32 leaf tensors (they may require grad), updated in place. The state
  // (exp_avg, exp_avg_sq: float32, on each parameter's device, zero) is created here.
  AdamW(std::vector<at::Tensor> params, AdamWOptions options);

  // One update with learning rate `lr` of every parameter whose grad is defined; the grads are
  // left as they are. One step counter serves all parameters (torch keeps one per parameter and
  // advances only those with a grad; the two agree whenever every parameter has a grad in every
  // step, as LoRA parameters do). At least one parameter must have a grad.
  void step(double lr);
  // Sets every parameter's grad to undefined (torch's zero_grad(set_to_none=True)).
  void zero_grad();

  // Updates done so far.
  int64_t steps() const { return step_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<at::Tensor>& params() const { return params_; }

  // "step" (int64, 0-dim, CPU), "exp_avg.<i>" and "exp_avg_sq.<i>" for parameter i: the live
  // state tensors (not copies), for writing into a run-state file.
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  // Replaces the state with a copy of `state` (as state_tensors() names it; any device). Checks
  // that it has exactly those keys, with these parameters' shapes, float32 moments and an int64
  // scalar step >= 0; errors name `source` (the file) and the key. On error nothing changes.
  void load_state_tensors(const std::map<std::string, at::Tensor>& state, const std::string& source);

 private:
  std::vector<at::Tensor> params_;
  AdamWOptions options_;
  std::vector<at::Tensor> exp_avg_;     // per parameter, its shape, float32, its device
  std::vector<at::Tensor> exp_avg_sq_;  // per parameter, its shape, float32, its device
  int64_t step_ = 0;
};

}  // namespace qtrain::engine::train
