// Activation checkpointing of one decoder layer, reentrant style (libtorch has no saved-tensor
// hooks without Python): forward runs the layer without recording a graph and keeps only the
// layer input (on the device, or in host memory with activation offloading) and the RNG state;
// backward re-acquires the layer's weights, restores the RNG (so LoRA dropout draws the same
// mask), recomputes with grad on and back-propagates. The layer's LoRA tensors are explicit
// inputs, so they receive gradients even when the input hidden state does not require grad (the
// first layer after a frozen embedding).
#pragma once

#include <atomic>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

#include "engine/model/decoder_layer.h"
#include "engine/schedule/offloaded_activations.h"
#include "engine/schedule/residency.h"

namespace qtrain::engine::schedule {

// What a checkpointed layer needs beyond its tensors. Must outlive the backward pass.
struct CheckpointContext {
  const model::DecoderLayer* layer = nullptr;
  const model::ModelConfig* config = nullptr;
  WeightResidency* residency = nullptr;
  std::atomic<int64_t>* recomputed = nullptr;  // incremented once per recompute
  bool training = true;
  // Where the layer input waits for the recompute: null keeps it on the device.
  OffloadedActivations* activations = nullptr;
  // How the recompute runs the layer's dense MLP (LayerInputs::mlp_runner); unset: directly.
  model::MlpRunner mlp_runner;
  // Checkpointed layers the forward runs after this one (OffloadedActivations::stash).
  int64_t checkpointed_after = 0;
};

// h: [B, T, H]. Returns the layer output; the graph it records is one node. A sparse layer asked
// for its RouterLoad (inputs.router_loads) appends it as the layer's forward does: its prob_sum is
// a second output of the node, so the load-balancing loss back-propagates through the recompute,
// whose own RouterLoad is used for that and never recorded (See Note [Load-balancing loss]).
at::Tensor checkpointed_layer(const at::Tensor& h, const model::LayerInputs& inputs, const CheckpointContext& ctx);

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // Tensor arguments: h, the rope tables, the segments (an empty tensor when unused), the router
  // token weights (an empty tensor when the router load is not recorded), then the layer's LoRA
  // tensors. Outputs: the layer output, and with a recorded router load its prob_sum and counts.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& h,
                                                const at::Tensor& cos,
                                                const at::Tensor& sin,
                                                const at::Tensor& segments,
                                                const at::Tensor& token_weights,
                                                at::TensorList params,
                                                const CheckpointContext* context);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out);
};

}  // namespace qtrain::engine::schedule
