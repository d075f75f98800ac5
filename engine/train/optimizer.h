// The optimizer of the trainable (LoRA) parameters as the trainer sees it: one step with a given
// learning rate, and its state as named tensors for a run-state file. Two implementations:
// AdamW (adamw.h, torch.optim.AdamW's numerics, float32 state) and AdamW8bit (adamw_8bit.h,
// bitsandbytes' AdamW8bit, blockwise 8-bit state). The run config picks one by name.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qtrain::engine::train {

struct AdamWOptions {
  double lr = 1e-3;  // the base lr; the lr of each update is the argument of Optimizer::step
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update with learning rate `lr` of every parameter whose grad is defined; the grads are
  // left as they are. One step counter serves all parameters (torch and bitsandbytes keep one per
  // parameter and advance only those with a grad; they agree whenever every parameter has a grad
  // in every step, as LoRA parameters do). At least one parameter must have a grad.
  //
  // `apply`, when defined, is a bool scalar on the parameters' device that decides the update on
  // the device: where it is false, the parameters and the state stay as they were, bit for bit,
  // and on a GPU the host never reads it (a step whose gradients are not finite; Note [Steps
  // decided on the device] in trainer.cpp). AdamW's CPU kernel reads it, which waits for nothing. The step counter
  // advances either way: the caller, once it has read `apply`, takes a skipped step back with step_skipped() before the
  // next step.
  virtual void step(double lr, const at::Tensor& apply) = 0;
  void step(double lr) { step(lr, at::Tensor()); }
  // The last step's update was not applied (its `apply` was false): the counter goes back.
  void step_skipped();

  // "step" (int64, 0-dim, CPU) and the moments of each parameter i, named "<moment>.<i>": the
  // live state tensors (not copies), for writing into a run-state file.
  virtual std::vector<std::pair<std::string, at::Tensor>> state_tensors() const = 0;
  // Replaces the state with a copy of `state` (as state_tensors() names it; any device). Checks
  // keys, dtypes and shapes against these parameters; errors name `source` (the file) and the
  // key. On error nothing changes.
  virtual void load_state_tensors(const std::map<std::string, at::Tensor>& state, const std::string& source) = 0;

  // The run config's name of this optimizer ("adamw_torch", "adamw_bnb_8bit"); checkpoints record
  // it, and a run resumes only with the optimizer that wrote them.
  virtual std::string_view name() const = 0;

  // Per-parameter multipliers of the step's learning rate, as torch's parameter groups with their
  // own lr under one schedule (LoRA+: lora_B at loraplus_lr_ratio times the rest). One per
  // parameter, each > 0; empty (the default): 1 for all.
  void set_lr_scales(std::vector<double> scales);
  // Per-parameter exemption from weight decay, as transformers' Trainer exempts the norms (and
  // biases) by name (get_decay_parameter_names). One per parameter; empty (the default): none.
  void set_decay_exempt(std::vector<bool> exempt);
  // Sets every parameter's grad to undefined (torch's zero_grad(set_to_none=True)).
  void zero_grad();
  // Updates done so far.
  int64_t steps() const { return step_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  // Bytes of the state tensors (the moments, their block scales and the step counter).
  int64_t state_nbytes() const;

 protected:
  // Checks the options and the parameters (float32, defined, distinct); `who` starts messages.
  Optimizer(std::vector<at::Tensor> params, AdamWOptions options, const char* who);
  // Checks `lr` and every defined grad against its parameter; at least one must be defined.
  void check_step(double lr, const char* who) const;
  // state[key], which must exist and be defined; `expected` describes the whole key set.
  static const at::Tensor& find_state(const std::map<std::string, at::Tensor>& state,
                                      const std::string& key,
                                      const std::string& source,
                                      const std::string& expected);
  // The "step" entry of a state map, checked (an int64 scalar >= 0); `expected` describes the
  // whole key set for the message when it is missing.
  static int64_t load_step(const std::map<std::string, at::Tensor>& state,
                           const std::string& source,
                           const std::string& expected);
  // Fails on a key of `state` that is not in `known`.
  static void check_no_extra_keys(const std::map<std::string, at::Tensor>& state,
                                  const std::vector<std::string>& known,
                                  const std::string& source,
                                  const std::string& expected);

  // The learning rate of parameter i in a step whose rate is `lr` (see set_lr_scales).
  double lr_of(size_t i, double lr) const { return lr_scales_.empty() ? lr : lr * lr_scales_[i]; }
  // The weight decay of parameter i (see set_decay_exempt).
  double weight_decay_of(size_t i) const {
    return !decay_exempt_.empty() && decay_exempt_[i] ? 0.0 : options_.weight_decay;
  }

  std::vector<at::Tensor> params_;
  std::vector<double> lr_scales_;
  std::vector<bool> decay_exempt_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

// The run config's optimizer names (engine/config): "adamw_torch" or "adamw_bnb_8bit".
std::unique_ptr<Optimizer> make_optimizer(std::string_view name, std::vector<at::Tensor> params, AdamWOptions options);

}  // namespace qtrain::engine::train
