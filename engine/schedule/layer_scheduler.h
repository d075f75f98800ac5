// Runs a model's decoder layers by an execution plan: owns train/eval mode, checkpointing and
// (through WeightResidency) when each layer's weights are usable. One training forward gives the
// loss; the caller runs backward; the scheduler's stats then say what the step recomputed.
#pragma once

#include <atomic>
#include <deque>
#include <memory>

#include <ATen/core/Tensor.h>

#include "engine/model/causal_lm.h"
#include "engine/schedule/checkpoint.h"
#include "engine/schedule/execution_plan.h"
#include "engine/schedule/residency.h"
#include "engine/schedule/tiled_mlp.h"

namespace qtrain::engine::schedule {

struct StepStats {
  int64_t layers_checkpointed = 0;  // in this step's plan
  int64_t layers_recomputed = 0;    // by backward so far
  int64_t activation_bytes = 0;     // memory the forward left allocated for backward (see layer_scheduler.cpp)
  // On CUDA, the allocator's allocated bytes when the last forward began: weights, adapters,
  // optimizer state, workspaces (0 on the CPU, where the heap also holds the host's data).
  int64_t resident_bytes = 0;
};

// One micro-batch. position_ids and segment_ids come with packed rows (several samples per
// row); undefined means positions 0..T-1 and one sample per row.
struct StepInputs {
  at::Tensor input_ids;     // int64 [B, T]
  at::Tensor labels;        // int64 [B, T], transformers' convention (shifted inside)
  at::Tensor position_ids;  // int64 [B, T] or undefined
  at::Tensor segment_ids;   // int64 [B, T] or undefined
  // [B, T], 1 on a token and 0 on padding (transformers' attention_mask); undefined: no padding.
  // Only the load-balancing loss reads it (See Note [Load-balancing loss]).
  at::Tensor attention_mask;
  // The predicted tokens (labels != -100 after the shift), counted where the labels were host
  // data; -1: counted from `labels`, a host read when they are on a device (Note [Host reads]).
  int64_t predicted_tokens = -1;
};

struct LossResult {
  at::Tensor loss_sum;  // float32 scalar, differentiable
  int64_t tokens = 0;   // predicted tokens (labels != -100 after the shift)
};

class LayerScheduler {
 public:
  // `residency` may be null: every layer is then resident.
  explicit LayerScheduler(model::CausalLM& model, std::shared_ptr<WeightResidency> residency = nullptr);

  // Puts the model in training mode, then marks the layers the policy checkpoints (every_kth:
  // layers 0, k, 2k, ...) and those whose weights the residency does not keep on the device
  // (offloaded layers). The only way to get a training plan.
  ExecutionPlan prepare_training(CheckpointPolicy policy, int64_t every_k = 1);
  ExecutionPlan prepare_eval();

  // A training plan is required; gradients are not computed here.
  LossResult train_forward(const ExecutionPlan& plan, const StepInputs& inputs);
  // The same pass up to the final-norm hidden states [B, T, H] (differentiable), for an objective
  // that computes its own loss from them (preference tuning); `inputs.labels` are not read.
  at::Tensor train_hidden(const ExecutionPlan& plan, const StepInputs& inputs);
  LossResult train_forward(const ExecutionPlan& plan, const at::Tensor& ids, const at::Tensor& labels) {
    return train_forward(plan, StepInputs{ids, labels, {}, {}, {}});
  }
  // No graph, no dropout; an eval plan is required. Returns the summed loss and token count.
  LossResult eval_loss(const ExecutionPlan& plan, const StepInputs& inputs);
  LossResult eval_loss(const ExecutionPlan& plan, const at::Tensor& ids, const at::Tensor& labels) {
    return eval_loss(plan, StepInputs{ids, labels, {}, {}, {}});
  }
  // Acquires and releases every layer in the order eval_loss does, computing nothing: a rank with
  // no evaluation batch left keeps in step with those that have one, when the residency gathers
  // layers collectively (a sharded base). An eval plan is required.
  void skip_eval(const ExecutionPlan& plan);
  // Final-norm hidden states [B, T, H] (for logits), under an eval plan.
  at::Tensor eval_hidden(const ExecutionPlan& plan, const at::Tensor& ids);
  // The same for `ids` (int64 [B, T]) continuing what `cache` holds, which gets their keys and
  // values; `valid` (bool [B, T]) is false on left padding (Note [KV cache]). Under an eval plan.
  at::Tensor decode_hidden(const ExecutionPlan& plan,
                           const at::Tensor& ids,
                           const at::Tensor& valid,
                           model::KvCache& cache);

  const StepStats& stats() const;
  // The load-balancing loss of the last train_forward (See Note [Load-balancing loss]): float32
  // scalar, differentiable, before router_aux_loss_coef; undefined unless the model's
  // output_router_logits asks for it.
  const at::Tensor& aux_loss() const { return aux_loss_; }
  WeightResidency& residency() { return *residency_; }
  // Checkpointed layers keep their inputs in `activations` (host memory) from the next
  // train_forward on; null keeps them on the device.
  void offload_activations(std::shared_ptr<OffloadedActivations> activations) { activations_ = std::move(activations); }
  // Every layer's dense MLP runs through `tiled` (in chunks of tokens) from the next pass on;
  // null runs it whole.
  void tile_mlp(std::shared_ptr<TiledMlp> tiled) { tiled_mlp_ = std::move(tiled); }
  model::CausalLM& model() { return model_; }

 private:
  model::LayerInputs layer_inputs(const StepInputs& inputs) const;
  // train_forward's and train_hidden's pass: a new step's state, the layers and the final norm
  // (and the load-balancing loss), under the caller's grad mode.
  at::Tensor train_layers(const ExecutionPlan& plan, const StepInputs& inputs);
  at::Tensor run_layers(const ExecutionPlan& plan, at::Tensor h, const model::LayerInputs& inputs);

  model::CausalLM& model_;
  std::shared_ptr<WeightResidency> residency_;
  std::shared_ptr<OffloadedActivations> activations_;
  std::shared_ptr<TiledMlp> tiled_mlp_;
  bool training_ = false;
  std::atomic<int64_t> recomputed_{0};
  // One context per checkpointed layer call of the current step; kept until the next step so
  // backward can read them (a deque: its elements never move).
  std::deque<CheckpointContext> contexts_;
  mutable StepStats stats_;
  at::Tensor aux_loss_;
};

}  // namespace qtrain::engine::schedule
