// DPO's reference when the run continues an adapter: the trainable tensors as the run started.
// See Note [Reference adapter].
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace qtrain::engine::train {

// Note [Reference adapter]
// TRL's DPOTrainer, handed a peft model that already has an adapter (axolotl hands it one when
// lora_model_dir is set), adds a frozen copy of it named "ref" and computes the reference through
// that copy (use_adapter(model, "ref")): the reference is the base plus the adapter the run
// started from, the model it continues, so the DPO loss starts at ln 2. (A new adapter has B = 0,
// so its copy adds nothing and the reference is the base: AdaptersOff computes that without the
// adapters' products, Note [Adapters off].) qtrain copies every trainable tensor of a run that
// starts from lora_model_dir (the adapters, DoRA's magnitudes, the modules trained in full) before
// a checkpoint it resumes from is loaded, so the copy is the starting adapter's, as TRL builds its
// "ref" from the model it is given. A ReferenceWeightsOn swaps the copies in: while it lives, each
// trainable tensor's data is its copy's (Tensor::set_data, what `param.data = ...` does in
// Python), the tensors themselves are the same, so every code path (streamed and sharded layers
// included) computes with the starting weights. The swap happens between micro-batches, when no
// autograd graph holds the tensors, under no gradient; the gradients are left alone.
class ReferenceWeights {
 public:
  // Copies of `params` as they are now (on their devices).
  explicit ReferenceWeights(std::vector<at::Tensor> params);

  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& copies() const { return copies_; }
  int64_t nbytes() const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> copies_;
};

// The starting weights in the trainable tensors for as long as it lives, and no gradient.
class ReferenceWeightsOn {
 public:
  explicit ReferenceWeightsOn(const ReferenceWeights& weights);
  ~ReferenceWeightsOn();
  ReferenceWeightsOn(const ReferenceWeightsOn&) = delete;
  ReferenceWeightsOn& operator=(const ReferenceWeightsOn&) = delete;

 private:
  const ReferenceWeights& weights_;
  std::vector<at::Tensor> trained_;  // the trained data, put back at the end
  bool grad_was_enabled_;
};

}  // namespace qtrain::engine::train
