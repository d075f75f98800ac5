// See checkpoint.h.
#include "engine/schedule/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "engine/schedule/rng_state.h"

namespace qtrain::engine::schedule {
namespace {
// An empty segments tensor stands for "no segments": autograd rejects undefined inputs.
// The checkpoint saves only the rope tables its layer uses (LayerInputs::rope_for).
model::LayerInputs layer_inputs(const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& segments) {
  return {ops::RopeTables{cos, sin}, {}, segments.numel() > 0 ? segments : at::Tensor()};
}
}  // namespace

at::Tensor CheckpointFunction::forward(torch::autograd::AutogradContext* ctx,
                                       const at::Tensor& h,
                                       const at::Tensor& cos,
                                       const at::Tensor& sin,
                                       const at::Tensor& segments,
                                       at::TensorList params,
                                       const CheckpointContext* context) {
  ctx->saved_data["context"] = reinterpret_cast<int64_t>(context);
  ctx->saved_data["rng"] = rng_state(h.device());
  ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
  ctx->save_for_backward({h, cos, sin, segments});
  // apply() runs this under no-grad: nothing inside the layer is recorded or kept.
  return context->layer->forward(h, layer_inputs(cos, sin, segments), *context->config, context->training);
}

torch::autograd::variable_list CheckpointFunction::backward(torch::autograd::AutogradContext* ctx,
                                                            torch::autograd::variable_list grad_out) {
  const auto* context = reinterpret_cast<const CheckpointContext*>(ctx->saved_data.at("context").toInt());
  const auto saved = ctx->get_saved_variables();
  const auto& h = saved[0];
  const int64_t layer = context->layer->index;
  // The backward engine runs on its own thread: grad mode must be switched on here.
  at::AutoGradMode grad_mode(true);
  context->residency->acquire(layer);
  auto h_in = h.detach().requires_grad_(h.requires_grad());
  at::Tensor out;
  {
    RngStateGuard rng(h.device(), ctx->saved_data.at("rng").toTensor());
    out =
        context->layer->forward(h_in, layer_inputs(saved[1], saved[2], saved[3]), *context->config, context->training);
  }
  ++*context->recomputed;
  // Differentiate the recomputed layer w.r.t. its input and its LoRA tensors and return the
  // gradients (rather than accumulating into .grad here), so the engine routes them as usual.
  std::vector<at::Tensor> inputs;
  if (h_in.requires_grad()) inputs.push_back(h_in);
  const auto params = context->layer->trainable_parameters();
  inputs.insert(inputs.end(), params.begin(), params.end());
  torch::autograd::variable_list grads;
  if (!inputs.empty() && out.requires_grad()) {
    grads = torch::autograd::grad({out},
                                  inputs,
                                  {grad_out[0]},
                                  /*retain_graph=*/false,
                                  /*create_graph=*/false,
                                  /*allow_unused=*/true);
  }
  context->residency->release(layer);
  torch::autograd::variable_list result;
  size_t next = 0;
  result.push_back(h_in.requires_grad() && !grads.empty() ? grads[next++] : at::Tensor());
  result.push_back(at::Tensor());  // cos
  result.push_back(at::Tensor());  // sin
  result.push_back(at::Tensor());  // segments
  for (size_t i = 0; i < params.size(); ++i) result.push_back(grads.empty() ? at::Tensor() : grads[next++]);
  result.push_back(at::Tensor());  // context
  return result;
}

at::Tensor checkpointed_layer(const at::Tensor& h, const model::LayerInputs& inputs, const CheckpointContext& ctx) {
  const auto params = ctx.layer->trainable_parameters();
  const auto segments = inputs.segments.defined() ? inputs.segments : at::empty({0}, h.options().dtype(at::kLong));
  const auto& rope = inputs.rope_for(ctx.layer->sliding_window.has_value());
  return CheckpointFunction::apply(h, rope.cos, rope.sin, segments, at::TensorList(params), &ctx);
}

}  // namespace qtrain::engine::schedule
