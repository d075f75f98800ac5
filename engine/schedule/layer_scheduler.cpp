// See layer_scheduler.h.
#include "engine/schedule/layer_scheduler.h"

#include <malloc.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>

extern "C" size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

namespace qtrain::engine::schedule {
namespace {

// Bytes currently allocated on `device`: on CUDA the caching allocator's allocated bytes (what
// its peak, peak_memory_bytes, counts), on the CPU this process's heap (glibc). Measured around
// the forward pass, the difference is what the forward keeps alive for backward (saved
// activations and the graph's tensors). Reading the allocator's counters does not synchronise.
// Under AddressSanitizer (scripts/test.sh --sanitize) malloc is the sanitizer's and glibc's
// counters read zero; its own count of allocated bytes is used there (a weak symbol: null
// otherwise).
int64_t heap_in_use(const at::Device& device) {
  if (device.is_cuda()) {
    // Index 0 is the aggregate over pool types.
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
  }
  if (!device.is_cpu()) return 0;
  if (__sanitizer_get_current_allocated_bytes != nullptr) {
    return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
  }
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

}  // namespace

CheckpointPolicy checkpoint_policy_from_name(const std::string& name) {
  if (name == "none" || name == "false") return CheckpointPolicy::none;
  if (name == "every_layer" || name == "true") return CheckpointPolicy::every_layer;
  if (name == "every_kth") return CheckpointPolicy::every_kth;
  TORCH_CHECK(false, "checkpoint policy '", name, "' is not known; use none, every_layer or every_kth");
}

int64_t ExecutionPlan::num_checkpointed() const {
  return std::count(checkpoint_.begin(), checkpoint_.end(), true);
}

LayerScheduler::LayerScheduler(model::CausalLM& model, std::shared_ptr<WeightResidency> residency)
    : model_(model), residency_(residency ? std::move(residency) : std::make_shared<ResidentWeights>()) {}

ExecutionPlan LayerScheduler::prepare_training(CheckpointPolicy policy, int64_t every_k) {
  TORCH_CHECK(
      policy != CheckpointPolicy::every_kth || every_k >= 1, "checkpoint every k-th layer needs k >= 1, got ", every_k);
  training_ = true;  // first the mode ...
  const int64_t n = model_.config().num_layers;
  std::vector<bool> checkpoint(n, false);  // ... then the checkpoints
  for (int64_t i = 0; i < n; ++i) {
    // A layer whose weights leave the device between forward and backward is always recomputed.
    checkpoint[i] = policy == CheckpointPolicy::every_layer ||
                    (policy == CheckpointPolicy::every_kth && i % every_k == 0) || residency_->needs_recompute(i);
  }
  return ExecutionPlan(true, std::move(checkpoint));
}

ExecutionPlan LayerScheduler::prepare_eval() {
  training_ = false;
  return ExecutionPlan(false, std::vector<bool>(model_.config().num_layers, false));
}

model::LayerInputs LayerScheduler::layer_inputs(const StepInputs& in) const {
  auto out =
      in.position_ids.defined() ? model_.layer_inputs(in.position_ids) : model_.layer_inputs(in.input_ids.size(1));
  if (in.segment_ids.defined()) out.segments = in.segment_ids.to(model_.device(), at::kLong);
  if (tiled_mlp_) out.mlp_runner = tiled_mlp_->runner();
  return out;
}

at::Tensor LayerScheduler::run_layers(const ExecutionPlan& plan, at::Tensor h, const model::LayerInputs& inputs) {
  TORCH_CHECK(plan.num_layers() == static_cast<int64_t>(model_.layers().size()),
              "the plan covers ",
              plan.num_layers(),
              " layers but the model has ",
              model_.layers().size());
  // Forward acquires every layer in order; backward re-acquires the checkpointed ones, last first.
  std::vector<int64_t> order;
  for (int64_t i = 0; i < plan.num_layers(); ++i) order.push_back(i);
  for (int64_t i = plan.num_layers() - 1; plan.training() && i >= 0; --i) {
    if (plan.checkpointed(i)) order.push_back(i);
  }
  residency_->plan_acquisitions(order);
  int64_t checkpointed_after = plan.training() ? plan.num_checkpointed() : 0;
  for (const auto& layer : model_.layers()) {
    const int64_t i = layer.index;
    residency_->acquire(i);
    if (plan.training() && plan.checkpointed(i)) {
      contexts_.push_back(CheckpointContext{&layer,
                                            &model_.config(),
                                            residency_.get(),
                                            &recomputed_,
                                            true,
                                            activations_.get(),
                                            inputs.mlp_runner,
                                            --checkpointed_after});
      h = checkpointed_layer(h, inputs, contexts_.back());
    } else {
      h = layer.forward(h, inputs, model_.config(), plan.training());
    }
    residency_->release(i);
  }
  return h;
}

void LayerScheduler::skip_eval(const ExecutionPlan& plan) {
  TORCH_CHECK(!plan.training(), "skip_eval was given a training plan; make it with prepare_eval()");
  std::vector<int64_t> order;
  for (int64_t i = 0; i < plan.num_layers(); ++i) order.push_back(i);
  residency_->plan_acquisitions(order);
  for (const int64_t i : order) {
    residency_->acquire(i);
    residency_->release(i);
  }
}

at::Tensor LayerScheduler::train_layers(const ExecutionPlan& plan, const StepInputs& inputs) {
  TORCH_CHECK(plan.training(), "a training step was given an eval plan; make it with prepare_training()");
  TORCH_CHECK(training_, "the scheduler was switched to eval after this plan was made; call prepare_training() again");
  contexts_.clear();
  if (activations_) activations_->begin_step();
  if (tiled_mlp_) tiled_mlp_->begin_step();
  recomputed_ = 0;
  stats_ = StepStats{plan.num_checkpointed(), 0, 0};
  auto layer_in = layer_inputs(inputs);
  const auto& moe = model_.config().moe;
  std::vector<model::RouterLoad> loads;
  if (moe && moe->output_router_logits) {
    layer_in.router_loads = &loads;
    layer_in.router_token_weights =
        inputs.attention_mask.defined()
            ? inputs.attention_mask.to(model_.device(), at::kFloat).reshape({-1})
            : at::ones({inputs.input_ids.numel()}, at::TensorOptions().dtype(at::kFloat).device(model_.device()));
  }
  auto h = model_.final_norm(run_layers(plan, model_.embed(inputs.input_ids), layer_in));
  aux_loss_ = loads.empty() ? at::Tensor() : model::load_balancing_loss(loads, layer_in.router_token_weights);
  return h;
}

LossResult LayerScheduler::train_forward(const ExecutionPlan& plan, const StepInputs& inputs) {
  const int64_t before = heap_in_use(model_.device());
  if (model_.device().is_cuda()) stats_.resident_bytes = before;
  at::AutoGradMode grad(true);
  const auto h = train_layers(plan, inputs);
  auto [sum, tokens] = model_.loss_sum(h, inputs.labels, inputs.predicted_tokens);
  stats_.activation_bytes = heap_in_use(model_.device()) - before;
  return {sum, tokens};
}

at::Tensor LayerScheduler::train_hidden(const ExecutionPlan& plan, const StepInputs& inputs) {
  const int64_t before = heap_in_use(model_.device());
  if (model_.device().is_cuda()) stats_.resident_bytes = before;
  at::AutoGradMode grad(true);
  auto h = train_layers(plan, inputs);
  stats_.activation_bytes = heap_in_use(model_.device()) - before;
  return h;
}

LossResult LayerScheduler::eval_loss(const ExecutionPlan& plan, const StepInputs& inputs) {
  TORCH_CHECK(!plan.training(), "eval_loss needs an eval plan; make it with prepare_eval()");
  at::NoGradGuard no_grad;
  auto h = run_layers(plan, model_.embed(inputs.input_ids), layer_inputs(inputs));
  auto [sum, tokens] = model_.loss_sum(model_.final_norm(h), inputs.labels, inputs.predicted_tokens);
  return {sum, tokens};
}

at::Tensor LayerScheduler::eval_hidden(const ExecutionPlan& plan, const at::Tensor& ids) {
  TORCH_CHECK(!plan.training(), "eval_hidden needs an eval plan; make it with prepare_eval()");
  at::NoGradGuard no_grad;
  return model_.final_norm(run_layers(plan, model_.embed(ids), layer_inputs(StepInputs{ids, {}, {}, {}, {}})));
}

at::Tensor LayerScheduler::decode_hidden(const ExecutionPlan& plan,
                                         const at::Tensor& ids,
                                         const at::Tensor& valid,
                                         model::KvCache& cache) {
  TORCH_CHECK(!plan.training(), "decode_hidden needs an eval plan; make it with prepare_eval()");
  at::NoGradGuard no_grad;
  auto inputs = model_.layer_inputs(cache.begin(valid.to(model_.device())));
  inputs.kv_cache = &cache;
  return model_.final_norm(run_layers(plan, model_.embed(ids), inputs));
}

const StepStats& LayerScheduler::stats() const {
  stats_.layers_recomputed = recomputed_.load();
  return stats_;
}

}  // namespace qtrain::engine::schedule
