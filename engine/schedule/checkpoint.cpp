// See checkpoint.h.
#include "engine/schedule/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "engine/schedule/rng_state.h"

namespace qtrain::engine::schedule {
namespace {
// An empty segments (token weights) tensor stands for "no segments" ("no router load"): autograd
// rejects undefined inputs. The checkpoint saves only the rope tables its layer uses
// (LayerInputs::rope_for). `loads` receives the layer's router load when token weights are given.
model::LayerInputs layer_inputs(const at::Tensor& cos,
                                const at::Tensor& sin,
                                const at::Tensor& segments,
                                const at::Tensor& token_weights,
                                std::vector<model::RouterLoad>* loads,
                                const model::MlpRunner& mlp_runner) {
  model::LayerInputs in;
  in.mlp_runner = mlp_runner;
  in.rope = ops::RopeTables{cos, sin};
  if (segments.numel() > 0) in.segments = segments;
  if (token_weights.numel() > 0) {
    in.router_loads = loads;
    in.router_token_weights = token_weights;
  }
  return in;
}
}  // namespace

torch::autograd::variable_list CheckpointFunction::forward(torch::autograd::AutogradContext* ctx,
                                                           const at::Tensor& h,
                                                           const at::Tensor& cos,
                                                           const at::Tensor& sin,
                                                           const at::Tensor& segments,
                                                           const at::Tensor& token_weights,
                                                           at::TensorList params,
                                                           const CheckpointContext* context) {
  ctx->saved_data["context"] = reinterpret_cast<int64_t>(context);
  ctx->saved_data["rng"] = rng_state(h.device());
  if (context->activations != nullptr) {
    // The input leaves for host memory; the slot it leaves in save_for_backward is an empty tensor.
    ctx->saved_data["stash"] = context->activations->stash(h, context->checkpointed_after);
    ctx->saved_data["input_requires_grad"] = h.requires_grad();
    ctx->save_for_backward({at::Tensor(), cos, sin, segments, token_weights});
  } else {
    ctx->save_for_backward({h, cos, sin, segments, token_weights});
  }
  // apply() runs this under no-grad: nothing inside the layer is recorded or kept.
  std::vector<model::RouterLoad> loads;
  auto out = context->layer->forward(h,
                                     layer_inputs(cos, sin, segments, token_weights, &loads, context->mlp_runner),
                                     *context->config,
                                     context->training);
  if (loads.empty()) return {out};
  ctx->mark_non_differentiable({loads[0].counts});
  return {out, loads[0].prob_sum, loads[0].counts};
}

torch::autograd::variable_list CheckpointFunction::backward(torch::autograd::AutogradContext* ctx,
                                                            torch::autograd::variable_list grad_out) {
  const auto* context = reinterpret_cast<const CheckpointContext*>(ctx->saved_data.at("context").toInt());
  const auto saved = ctx->get_saved_variables();
  const int64_t layer = context->layer->index;
  // The backward engine runs on its own thread: grad mode must be switched on here.
  at::AutoGradMode grad_mode(true);
  context->residency->acquire(layer);
  const bool stashed = ctx->saved_data.find("stash") != ctx->saved_data.end();
  const at::Tensor h = stashed ? context->activations->restore(ctx->saved_data.at("stash").toInt()) : saved[0];
  const bool input_requires_grad =
      stashed ? ctx->saved_data.at("input_requires_grad").toBool() : saved[0].requires_grad();
  auto h_in = h.detach().requires_grad_(input_requires_grad);
  at::Tensor out;
  std::vector<model::RouterLoad> loads;  // the recompute's: differentiated, never recorded
  {
    RngStateGuard rng(h_in.device(), ctx->saved_data.at("rng").toTensor());
    out = context->layer->forward(h_in,
                                  layer_inputs(saved[1], saved[2], saved[3], saved[4], &loads, context->mlp_runner),
                                  *context->config,
                                  context->training);
  }
  ++*context->recomputed;
  // Differentiate the recomputed layer w.r.t. its input and its LoRA tensors and return the
  // gradients (rather than accumulating into .grad here), so the engine routes them as usual.
  std::vector<at::Tensor> inputs;
  if (h_in.requires_grad()) inputs.push_back(h_in);
  const auto params = context->layer->trainable_parameters();
  inputs.insert(inputs.end(), params.begin(), params.end());
  torch::autograd::variable_list outputs, output_grads;
  if (out.requires_grad()) {
    outputs.push_back(out);
    output_grads.push_back(grad_out[0]);
  }
  if (!loads.empty() && grad_out.size() > 1 && grad_out[1].defined() && loads[0].prob_sum.requires_grad()) {
    outputs.push_back(loads[0].prob_sum);
    output_grads.push_back(grad_out[1]);
  }
  torch::autograd::variable_list grads;
  if (!inputs.empty() && !outputs.empty()) {
    grads = torch::autograd::grad(outputs,
                                  inputs,
                                  output_grads,
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
  result.push_back(at::Tensor());  // token weights
  for (size_t i = 0; i < params.size(); ++i) result.push_back(grads.empty() ? at::Tensor() : grads[next++]);
  result.push_back(at::Tensor());  // context
  return result;
}

at::Tensor checkpointed_layer(const at::Tensor& h, const model::LayerInputs& inputs, const CheckpointContext& ctx) {
  const auto params = ctx.layer->trainable_parameters();
  const auto empty = at::empty({0}, h.options().dtype(at::kLong));
  const auto& segments = inputs.segments.defined() ? inputs.segments : empty;
  const bool record = inputs.router_loads != nullptr && ctx.layer->moe.has_value();
  const auto token_weights = record ? inputs.router_token_weights : empty.to(at::kFloat);
  const auto& rope = inputs.rope_for(ctx.layer->sliding_window.has_value());
  auto outs = CheckpointFunction::apply(h, rope.cos, rope.sin, segments, token_weights, at::TensorList(params), &ctx);
  if (outs.size() > 1) inputs.router_loads->push_back({outs[1], outs[2]});
  return outs[0];
}

}  // namespace qtrain::engine::schedule
