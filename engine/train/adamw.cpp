// See adamw.h.
#include "engine/train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <set>

namespace qtrain::engine::train {
namespace {

// Comparisons that hold for the allowed range, so that NaN fails too.
void check_option(double value, double lo, double hi, bool hi_inclusive, const char* name) {
  const bool ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  TORCH_CHECK(ok,
              "AdamW: ",
              name,
              " is ",
              value,
              "; it must be in [",
              lo,
              ", ",
              hi,
              hi_inclusive ? "]" : ")",
              " (check the optimizer settings of the run config)");
}

}  // namespace

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options) : params_(std::move(params)), options_(options) {
  const double inf = INFINITY;
  check_option(options_.lr, 0.0, inf, true, "lr");
  check_option(options_.beta1, 0.0, 1.0, false, "beta1");
  check_option(options_.beta2, 0.0, 1.0, false, "beta2");
  check_option(options_.eps, 0.0, inf, true, "eps");
  check_option(options_.weight_decay, 0.0, inf, true, "weight_decay");
  TORCH_CHECK(!params_.empty(), "AdamW: no parameters to optimize (no LoRA adapter attached?)");
  std::set<const void*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    TORCH_CHECK(p.defined(), "AdamW: parameter ", i, " is an undefined tensor");
    // float32 only: the state is float32 and the update must match torch's float32 arithmetic.
    TORCH_CHECK(p.scalar_type() == at::kFloat,
                "AdamW: parameter ",
                i,
                " is ",
                p.scalar_type(),
                "; qtrain trains parameters in float32 (keep LoRA weights float32)");
    TORCH_CHECK(seen.insert(p.unsafeGetTensorImpl()).second,
                "AdamW: parameter ",
                i,
                " is given twice; it would be updated twice per step");
    exp_avg_.push_back(at::zeros_like(p));
    exp_avg_sq_.push_back(at::zeros_like(p));
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
void AdamW::step(double lr) {
  TORCH_CHECK(lr >= 0.0 && std::isfinite(lr), "AdamW::step: lr is ", lr, "; it must be finite and >= 0");
  bool any_grad = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& grad = params_[i].grad();
    if (!grad.defined()) continue;
    TORCH_CHECK(grad.sizes() == params_[i].sizes() && grad.scalar_type() == at::kFloat,
                "AdamW::step: the grad of parameter ",
                i,
                " is ",
                grad.scalar_type(),
                " ",
                grad.sizes(),
                " but the parameter is Float ",
                params_[i].sizes());
    any_grad = true;
  }
  TORCH_CHECK(any_grad,
              "AdamW::step: none of the ",
              params_.size(),
              " parameters has a grad (run backward before the optimizer step)");

  at::NoGradGuard no_grad;
  ++step_;
  const double step = static_cast<double>(step_);
  const double beta1 = options_.beta1;
  const double beta2 = options_.beta2;
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& param = params_[i];
    const auto& grad = param.grad();
    if (!grad.defined()) continue;
    if (options_.weight_decay != 0) param.mul_(1 - lr * options_.weight_decay);
    exp_avg_[i].lerp_(grad, 1 - beta1);
    exp_avg_sq_[i].mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const auto denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(options_.eps);
    param.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
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
  const auto expected = [&] {
    return c10::str("expected 'step', 'exp_avg.<i>' and 'exp_avg_sq.<i>' for i = 0 .. ",
                    n - 1,
                    " (the optimizer has ",
                    n,
                    " parameters)");
  };
  const auto find = [&](const std::string& key) -> const at::Tensor& {
    const auto it = state.find(key);
    TORCH_CHECK(it != state.end(),
                source,
                ": the optimizer state has no '",
                key,
                "'; ",
                expected(),
                ". Was it saved by a run with other LoRA targets or settings?");
    TORCH_CHECK(it->second.defined(), source, ": the optimizer state '", key, "' is an undefined tensor");
    return it->second;
  };

  const auto& step = find("step");
  TORCH_CHECK(step.scalar_type() == at::kLong && step.dim() == 0,
              source,
              ": the optimizer state 'step' is ",
              step.scalar_type(),
              " ",
              step.sizes(),
              "; expected an int64 scalar (shape [])");
  const int64_t steps = step.item<int64_t>();
  TORCH_CHECK(steps >= 0, source, ": the optimizer state 'step' is ", steps, "; a step count must be >= 0");

  std::set<std::string> known{"step"};
  std::vector<at::Tensor> exp_avg;
  std::vector<at::Tensor> exp_avg_sq;
  for (size_t i = 0; i < n; ++i) {
    for (auto [prefix, out] : {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}}) {
      const std::string key = prefix + std::to_string(i);
      const auto& t = find(key);
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
      known.insert(key);
    }
  }
  for (const auto& [key, t] : state) {
    TORCH_CHECK(known.contains(key),
                source,
                ": unexpected optimizer state tensor '",
                key,
                "'; ",
                expected(),
                ". Was it saved by a run with other LoRA targets?");
  }
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  step_ = steps;
}

}  // namespace qtrain::engine::train
