// See optimizer.h.
#include "engine/train/optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/train/adamw.h"
#include "engine/train/adamw_8bit.h"

namespace qtrain::engine::train {
namespace {

// Comparisons that hold for the allowed range, so that NaN fails too.
void check_option(double value, double lo, double hi, bool hi_inclusive, const char* name, const char* who) {
  const bool ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  TORCH_CHECK(ok,
              who,
              ": ",
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

void Optimizer::set_lr_scales(std::vector<double> scales) {
  TORCH_CHECK(scales.empty() || scales.size() == params_.size(),
              "set_lr_scales: ",
              scales.size(),
              " learning-rate scales for ",
              params_.size(),
              " parameters");
  for (const double s : scales) {
    TORCH_CHECK(s > 0 && std::isfinite(s), "set_lr_scales: a learning-rate scale is ", s, "; it must be positive");
  }
  lr_scales_ = std::move(scales);
}

void Optimizer::set_decay_exempt(std::vector<bool> exempt) {
  TORCH_CHECK(exempt.empty() || exempt.size() == params_.size(),
              "set_decay_exempt: ",
              exempt.size(),
              " flags for ",
              params_.size(),
              " parameters");
  decay_exempt_ = std::move(exempt);
}

Optimizer::Optimizer(std::vector<at::Tensor> params, AdamWOptions options, const char* who)
    : params_(std::move(params)), options_(options) {
  const double inf = INFINITY;
  check_option(options_.lr, 0.0, inf, true, "lr", who);
  check_option(options_.beta1, 0.0, 1.0, false, "beta1", who);
  check_option(options_.beta2, 0.0, 1.0, false, "beta2", who);
  check_option(options_.eps, 0.0, inf, true, "eps", who);
  check_option(options_.weight_decay, 0.0, inf, true, "weight_decay", who);
  TORCH_CHECK(!params_.empty(), who, ": no parameters to optimize (no LoRA adapter attached?)");
  std::set<const void*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    TORCH_CHECK(p.defined(), who, ": parameter ", i, " is an undefined tensor");
    // float32 only: the state is float32 (or dequantizes to it) and the update must match the
    // reference's float32 arithmetic.
    TORCH_CHECK(p.scalar_type() == at::kFloat,
                who,
                ": parameter ",
                i,
                " is ",
                p.scalar_type(),
                "; qtrain trains parameters in float32 (keep LoRA weights float32)");
    TORCH_CHECK(seen.insert(p.unsafeGetTensorImpl()).second,
                who,
                ": parameter ",
                i,
                " is given twice; it would be updated twice per step");
  }
}

void Optimizer::check_step(double lr, const char* who) const {
  TORCH_CHECK(lr >= 0.0 && std::isfinite(lr), who, "::step: lr is ", lr, "; it must be finite and >= 0");
  bool any_grad = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& grad = params_[i].grad();
    if (!grad.defined()) continue;
    TORCH_CHECK(grad.sizes() == params_[i].sizes() && grad.scalar_type() == at::kFloat,
                who,
                "::step: the grad of parameter ",
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
              who,
              "::step: none of the ",
              params_.size(),
              " parameters has a grad (run backward before the optimizer step)");
}

void Optimizer::step_skipped() {
  TORCH_CHECK(step_ > 0, "Optimizer::step_skipped: no step was taken");
  --step_;
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

int64_t Optimizer::state_nbytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : state_tensors()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

const at::Tensor& Optimizer::find_state(const std::map<std::string, at::Tensor>& state,
                                        const std::string& key,
                                        const std::string& source,
                                        const std::string& expected) {
  const auto it = state.find(key);
  TORCH_CHECK(it != state.end(),
              source,
              ": the optimizer state has no '",
              key,
              "'; ",
              expected,
              ". Was it saved by a run with other LoRA targets or settings?");
  TORCH_CHECK(it->second.defined(), source, ": the optimizer state '", key, "' is an undefined tensor");
  return it->second;
}

int64_t Optimizer::load_step(const std::map<std::string, at::Tensor>& state,
                             const std::string& source,
                             const std::string& expected) {
  const auto& step = find_state(state, "step", source, expected);
  TORCH_CHECK(step.scalar_type() == at::kLong && step.dim() == 0,
              source,
              ": the optimizer state 'step' is ",
              step.scalar_type(),
              " ",
              step.sizes(),
              "; expected an int64 scalar (shape [])");
  const int64_t steps = step.item<int64_t>();
  TORCH_CHECK(steps >= 0, source, ": the optimizer state 'step' is ", steps, "; a step count must be >= 0");
  return steps;
}

void Optimizer::check_no_extra_keys(const std::map<std::string, at::Tensor>& state,
                                    const std::vector<std::string>& known,
                                    const std::string& source,
                                    const std::string& expected) {
  const std::set<std::string> names(known.begin(), known.end());
  for (const auto& [key, t] : state) {
    TORCH_CHECK(names.contains(key),
                source,
                ": unexpected optimizer state tensor '",
                key,
                "'; ",
                expected,
                ". Was it saved by a run with other LoRA targets?");
  }
}

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, std::vector<at::Tensor> params, AdamWOptions options) {
  if (name == AdamW::kName) return std::make_unique<AdamW>(std::move(params), options);
  if (name == AdamW8bit::kName) return std::make_unique<AdamW8bit>(std::move(params), options);
  TORCH_CHECK(false,
              "unknown optimizer '",
              std::string(name),
              "'; qtrain implements ",
              AdamW::kName,
              " and ",
              AdamW8bit::kName);
}

}  // namespace qtrain::engine::train
