// AdamW for the trainable (LoRA) parameters, with its state as named tensors.
//
// qtrain's own optimizer rather than torch::optim::AdamW, for two reasons: its state must go into
// a safetensors run-state file and come back exactly (torch::optim keys state by TensorImpl
// pointer, and 1.13 and 2.x differ), and a step must be bit-identical to the Hugging Face
// Trainer's default optimizer, torch.optim.AdamW on its single-tensor path, so that a qtrain
// run and a Python run with the same gradients produce the same weights. See Note [AdamW op
// order] in adamw.cpp.
#pragma once

#include <optional>

#include "engine/train/optimizer.h"

namespace qtrain::engine::train {

// How AdamW runs its arithmetic (Note [AdamW kernels] in adamw.cpp).
enum class AdamWKernel {
  multi_tensor,  // torch's single-tensor ops as _foreach_ operators, bit for bit; `apply` read on the host
  fused,         // torch's fused AdamW kernel, `apply` taken on the device
};

class AdamW final : public Optimizer {
 public:
  static constexpr std::string_view kName = "adamw_torch";

  // `params`: float32 leaf tensors (they may require grad), updated in place. The state
  // (exp_avg, exp_avg_sq: float32, on each parameter's device, zero) is created here. `kernel`:
  // fused for parameters on CUDA, multi_tensor otherwise, unless given.
  AdamW(std::vector<at::Tensor> params, AdamWOptions options, std::optional<AdamWKernel> kernel = std::nullopt);

  using Optimizer::step;
  void step(double lr, const at::Tensor& apply) override;
  // "step", then "exp_avg.<i>" and "exp_avg_sq.<i>" (float32, the parameter's shape).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const override;
  void load_state_tensors(const std::map<std::string, at::Tensor>& state, const std::string& source) override;
  std::string_view name() const override { return kName; }

 private:
  void step_multi_tensor(double lr, const at::Tensor& apply);
  void step_fused(double lr, const at::Tensor& apply);

  AdamWKernel kernel_;
  std::vector<at::Tensor> exp_avg_;     // per parameter, its shape, float32, its device
  std::vector<at::Tensor> exp_avg_sq_;  // per parameter, its shape, float32, its device
  at::Tensor step_count_;               // fused: the step as float32 [1] on the parameters' device
};

}  // namespace qtrain::engine::train
