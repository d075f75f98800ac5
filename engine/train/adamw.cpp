// See adamw.h.
#include "engine/train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <map>
#include <utility>

namespace qtrain::engine::train {

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options, std::optional<AdamWKernel> kernel)
    : Optimizer(std::move(params), options, "AdamW") {
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p));
    exp_avg_sq_.push_back(at::zeros_like(p));
  }
  const bool on_cuda = !params_.empty() && params_.front().is_cuda();
  kernel_ = kernel.value_or(on_cuda ? AdamWKernel::fused : AdamWKernel::multi_tensor);
  if (kernel_ == AdamWKernel::fused && !params_.empty()) step_count_ = at::zeros({1}, params_.front().options());
}

// Note [AdamW kernels]
// Two ways to run the same update. multi_tensor (the CPU's) is torch.optim.AdamW(foreach=False)
// bit for bit (Note [AdamW op order], Note [Multi-tensor AdamW]), as the HF Trainer runs it on
// the CPU; a step it must not apply is decided on the host, which on the CPU reads host memory
// and waits for nothing. fused (CUDA's) is torch's own fused kernel, torch.optim.AdamW(fused=True):
// one launch per group of parameters that share a learning rate and a weight decay (one group, or
// a few with LoRA+ and norms exempt from decay), and it takes `apply` on the device as its
// found_inf, the flag torch's GradScaler hands it to skip a step, so a skipped step costs the host
// nothing. Its step counter is read on the device (step_count_, filled from the host's count each
// step). Its float32 arithmetic is the same update in another order, so the two differ by
// rounding (AdamW.FusedKernelFollowsTheMultiTensorKernel bounds it on the CPU, where torch has the
// fused kernel too; TrainStepCuda.FusedAdamWTracksTheCpuKernelAndSkipsOnTheDevice on CUDA).
void AdamW::step(double lr, const at::Tensor& apply) {
  check_step(lr, "AdamW");
  at::NoGradGuard no_grad;
  ++step_;
  if (kernel_ == AdamWKernel::fused) {
    step_fused(lr, apply);
  } else {
    step_multi_tensor(lr, apply);
  }
}

void AdamW::step_fused(double lr, const at::Tensor& apply) {
  step_count_.fill_(static_cast<double>(step_));
  std::optional<at::Tensor> found_inf;
  if (apply.defined()) found_inf = at::logical_not(apply).to(at::kFloat).reshape({1});
  struct Group {
    std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq;
  };
  std::map<std::pair<double, double>, Group> groups;  // by (lr, weight decay)
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& grad = params_[i].grad();
    if (!grad.defined()) continue;
    auto& g = groups[{lr_of(i, lr), weight_decay_of(i)}];
    g.params.push_back(params_[i]);
    g.grads.push_back(grad);
    g.exp_avg.push_back(exp_avg_[i]);
    g.exp_avg_sq.push_back(exp_avg_sq_[i]);
  }
  for (auto& [lr_and_decay, g] : groups) {
    const std::vector<at::Tensor> steps(g.params.size(), step_count_);
    at::_fused_adamw_(g.params,
                      g.grads,
                      g.exp_avg,
                      g.exp_avg_sq,
                      /*max_exp_avg_sqs=*/{},
                      steps,
                      lr_and_decay.first,
                      options_.beta1,
                      options_.beta2,
                      lr_and_decay.second,
                      options_.eps,
                      /*amsgrad=*/false,
                      /*maximize=*/false,
                      /*grad_scale=*/std::nullopt,
                      found_inf);
  }
}

// Note [AdamW op order]
// torch.optim.AdamW(foreach=False, fused=False, capturable=False) runs `_single_tensor_adam` in
// torch/optim/adam.py with decoupled weight decay. Bitwise equality needs the same ATen ops in
// the same order with the same scalars: the step counter is a float32 tensor whose value (an
// integer, exact below 2^24) the Python code turns into a Python float, so all scalar math
// (bias corrections, step size, the decay factor) is double, and `x ** 0.5` on a Python float
// is C pow(x, 0.5), not sqrt. Tensor-scalar ops take a double Scalar in both languages, which
// the float32 kernels round once, identically. The double math must not be contracted into
// fused multiply-adds (`1 - lr * weight_decay` fused rounds once, Python rounds twice): baseline
// x86-64 has no FMA, and a build for a target that has one needs -ffp-contract=off.
//
// Note [Multi-tensor AdamW]
// The same ops run once over all parameters that have a gradient, as ATen's multi-tensor
// (_foreach_*) operators: on CUDA a few launches per step instead of seven per parameter (issue
// 26), on the CPU a loop over the same per-tensor kernels. The per-parameter scalars (weight
// decay factor and step size, which LoRA+ makes differ) go as scalar lists, computed in double
// as before (a parameter exempt from weight decay is multiplied by 1, which changes no bit, as
// torch's group without decay skips the product). Each element sees the same operations with the same scalars in the
// same order, so the results are those of the per-tensor loop, bit for bit (AdamW.* holds them against torch's
// single-tensor path).
void AdamW::step_multi_tensor(double lr, const at::Tensor& apply) {
  if (apply.defined()) {
    TORCH_CHECK(apply.is_cpu(), "AdamW: the multi-tensor kernel decides a step on the host; on CUDA use the fused one");
    if (!apply.item<bool>()) return;
  }
  const double step = static_cast<double>(step_);
  const double beta1 = options_.beta1;
  const double beta2 = options_.beta2;
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
  std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq;
  std::vector<at::Scalar> decay, step_size;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& grad = params_[i].grad();
    if (!grad.defined()) continue;
    const double lr_i = lr_of(i, lr);
    params.push_back(params_[i]);
    grads.push_back(grad);
    exp_avg.push_back(exp_avg_[i]);
    exp_avg_sq.push_back(exp_avg_sq_[i]);
    decay.emplace_back(1 - lr_i * weight_decay_of(i));
    step_size.emplace_back(-(lr_i / bias_correction1));
  }
  // On the CPU a multi-tensor operator is a loop over its tensors, one operator after the other:
  // run over all parameters at once, each operator would stream every moment through memory
  // again. So it runs over chunks of about kCacheChunkBytes of parameters, whose tensors stay in
  // cache from one operator to the next (the same arithmetic per element, so the same bits).
  constexpr int64_t kCacheChunkBytes = 128 << 10;
  for (size_t begin = 0, end = 0; begin < params.size(); begin = end) {
    int64_t bytes = 0;
    while (end < params.size() && (end == begin || bytes + params[end].nbytes() <= kCacheChunkBytes)) {
      bytes += static_cast<int64_t>(params[end].nbytes());
      ++end;
    }
    const auto part = [&](const auto& list) { return at::ArrayRef(list).slice(begin, end - begin); };
    if (options_.weight_decay != 0) at::_foreach_mul_(part(params), part(decay));
    at::_foreach_lerp_(part(exp_avg), part(grads), 1 - beta1);
    at::_foreach_mul_(part(exp_avg_sq), beta2);
    at::_foreach_addcmul_(part(exp_avg_sq), part(grads), part(grads), 1 - beta2);
    auto denom = at::_foreach_sqrt(part(exp_avg_sq));
    at::_foreach_div_(denom, bias_correction2_sqrt);
    at::_foreach_add_(denom, options_.eps);
    at::_foreach_addcdiv_(part(params), part(exp_avg), denom, part(step_size));
  }
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(1 + 2 * params_.size());
  out.emplace_back("step", at::scalar_tensor(step_, at::kLong));
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + std::to_string(i), exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state_tensors(const std::map<std::string, at::Tensor>& state, const std::string& source) {
  const auto n = params_.size();
  const std::string expected = c10::str("expected 'step', 'exp_avg.<i>' and 'exp_avg_sq.<i>' for i = 0 .. ",
                                        n - 1,
                                        " (the optimizer has ",
                                        n,
                                        " parameters)");
  const int64_t steps = load_step(state, source, expected);
  std::vector<std::string> known{"step"};
  std::vector<at::Tensor> exp_avg;
  std::vector<at::Tensor> exp_avg_sq;
  for (size_t i = 0; i < n; ++i) {
    for (auto [prefix, out] : {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}}) {
      const std::string key = prefix + std::to_string(i);
      const auto& t = find_state(state, key, source, expected);
      TORCH_CHECK(t.scalar_type() == at::kFloat,
                  source,
                  ": the optimizer state '",
                  key,
                  "' is ",
                  t.scalar_type(),
                  "; expected Float (float32)");
      TORCH_CHECK(t.sizes() == params_[i].sizes(),
                  source,
                  ": the optimizer state '",
                  key,
                  "' has shape ",
                  t.sizes(),
                  " but parameter ",
                  i,
                  " has shape ",
                  params_[i].sizes(),
                  " (saved by a run with another LoRA rank or targets?)");
      out->push_back(at::empty_like(params_[i]).copy_(t));
      known.push_back(key);
    }
  }
  check_no_extra_keys(state, known, source, expected);
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  step_ = steps;
}

}  // namespace qtrain::engine::train
