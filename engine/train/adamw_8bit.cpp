// See adamw_8bit.h.
#include "engine/train/adamw_8bit.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "ops/quant/codebook.h"

namespace qtrain::engine::train {
namespace {

at::Tensor code_tensor(const std::array<float, 256>& code) {
  return at::from_blob(const_cast<float*>(code.data()), {256}, at::kFloat).clone();
}

int64_t blocks_of(int64_t n) {
  return (n + AdamW8bit::kBlocksize - 1) / AdamW8bit::kBlocksize;
}

}  // namespace

AdamW8bit::AdamW8bit(std::vector<at::Tensor> params, AdamWOptions options)
    : Optimizer(std::move(params), options, "AdamW8bit"),
      qmap1_(code_tensor(ops::dynamic_map_signed()).to(params_.empty() ? at::kCPU : params_.front().device())),
      qmap2_(code_tensor(ops::dynamic_map_unsigned()).to(params_.empty() ? at::kCPU : params_.front().device())) {
  for (const auto& p : params_) {
    Moments m;
    if (p.numel() >= kMin8bitNumel) {
      const auto bytes = p.options().dtype(at::kByte);
      m.exp_avg = at::zeros(p.sizes(), bytes);
      m.exp_avg_sq = at::zeros(p.sizes(), bytes);
      m.exp_avg_absmax = at::zeros({blocks_of(p.numel())}, p.options());
      m.exp_avg_sq_absmax = at::zeros({blocks_of(p.numel())}, p.options());
    } else {
      m.exp_avg = at::zeros_like(p);
      m.exp_avg_sq = at::zeros_like(p);
    }
    state_.push_back(std::move(m));
  }
}

// Note [AdamW8bit update]
// bitsandbytes 0.50's AdamW8bit is Optimizer2State("adam", optim_bits=8, min_8bit_size=4096,
// percentile clipping off, max_unorm 0). Per parameter with a grad, its step counter t advances
// and one of two ops of bitsandbytes/backends/cpu/ops.py runs; we run the same ATen ops with the
// same scalars (double scalar math, as Python floats are; see Note [AdamW op order] in
// adamw.cpp for why that is bit-exact):
//  - 8-bit state (numel >= 4096), _optimizer_update_8bit_blockwise_cpu: dequantize both moments
//    (code[byte] * absmax, blocks of 256; exp_avg with the signed dynamic map, exp_avg_sq with
//    the unsigned one), m = m * beta1 + (1 - beta1) * g; v = v * beta2 + (1 - beta2) * g * g;
//    denom = sqrt(v) / sqrt(1 - beta2^t) + eps; p *= 1 - lr * wd (when wd > 0);
//    p += -lr / (1 - beta1^t) * m / denom; then quantize m and v again with new block absmax
//    (See Note [The 8-bit grid quantizer] in ops/quant/blockwise_8bit.cpp).
//  - float32 state, _optimizer_update_32bit_cpu: the same moments, p *= 1 - lr * wd (when
//    wd > 0), then p += (-lr * sqrt(1 - beta2^t) / (1 - beta1^t)) * m / (sqrt(v) + eps *
//    sqrt(1 - beta2^t)): eps enters scaled, unlike torch's AdamW, so small tensors do not take
//    torch's update either.
// bitsandbytes' CUDA kernel (kOptimizerStatic8bit2StateBlockwise) computes the same update in one
// pass with fast-math, but decays the weight after the Adam step instead of before, picks the
// exact nearest code, and nudges a first-moment code whose sign differs from the value's. On a
// GPU bitsandbytes therefore differs from this (and from its own CPU path) by rounding-level
// amounts per step; qtrain runs the CPU path's arithmetic on every device.
// A step decided on the device (`apply`): each parameter's new values and moments are computed
// beside the old ones and taken where `apply` is true (at::where, which keeps the old values
// bit for bit, NaN and infinity included), so the host never reads it.
void AdamW8bit::step(double step_lr, const at::Tensor& apply) {
  check_step(step_lr, "AdamW8bit");
  at::NoGradGuard no_grad;
  ++step_;
  const double step = static_cast<double>(step_);
  const double beta1 = options_.beta1;
  const double beta2 = options_.beta2;
  const double eps = options_.eps;
  const double correction1 = 1.0 - std::pow(beta1, step);
  const double correction2 = std::sqrt(1.0 - std::pow(beta2, step));
  const auto commit = [&](at::Tensor& dst, const at::Tensor& computed) {
    dst.copy_(apply.defined() ? at::where(apply, computed, dst) : computed);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& param = params_[i];
    const auto& grad = param.grad();
    if (!grad.defined()) continue;
    const double lr = lr_of(i, step_lr);
    const double weight_decay = weight_decay_of(i);
    auto& s = state_[i];
    const auto decayed = weight_decay > 0.0 ? param.mul(1.0 - lr * weight_decay) : param.clone();
    if (!is_8bit(i)) {
      const auto m = s.exp_avg.mul(beta1).add_(grad, 1.0 - beta1);
      const auto v = s.exp_avg_sq.mul(beta2).addcmul_(grad, grad, 1.0 - beta2);
      const double step_size = -lr * correction2 / correction1;
      const auto update = m / (v.sqrt() + eps * correction2);
      commit(param, decayed.add_(update, step_size));
      commit(s.exp_avg, m);
      commit(s.exp_avg_sq, v);
      continue;
    }
    auto m = at::empty_like(param);
    auto v = at::empty_like(param);
    ops::dequantize_blockwise_8bit_into(s.exp_avg, s.exp_avg_absmax, qmap1_, kBlocksize, m);
    ops::dequantize_blockwise_8bit_into(s.exp_avg_sq, s.exp_avg_sq_absmax, qmap2_, kBlocksize, v);
    m.mul_(beta1).add_(grad, 1.0 - beta1);
    v.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
    const auto denom = (v.sqrt() / correction2).add_(eps);
    commit(param, decayed.addcdiv_(m, denom, -lr / correction1));
    auto codes1 = at::empty_like(s.exp_avg), absmax1 = at::empty_like(s.exp_avg_absmax);
    auto codes2 = at::empty_like(s.exp_avg_sq), absmax2 = at::empty_like(s.exp_avg_sq_absmax);
    ops::quantize_blockwise_8bit_into(m, ops::dynamic_map_signed(), kBlocksize, codes1, absmax1);
    ops::quantize_blockwise_8bit_into(v, ops::dynamic_map_unsigned(), kBlocksize, codes2, absmax2);
    commit(s.exp_avg, codes1);
    commit(s.exp_avg_absmax, absmax1);
    commit(s.exp_avg_sq, codes2);
    commit(s.exp_avg_sq_absmax, absmax2);
  }
}

std::vector<std::pair<std::string, at::Tensor>> AdamW8bit::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("step", at::scalar_tensor(step_, at::kLong));
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto index = std::to_string(i);
    const auto& s = state_[i];
    out.emplace_back("exp_avg." + index, s.exp_avg);
    out.emplace_back("exp_avg_sq." + index, s.exp_avg_sq);
    if (is_8bit(i)) {
      out.emplace_back("exp_avg_absmax." + index, s.exp_avg_absmax);
      out.emplace_back("exp_avg_sq_absmax." + index, s.exp_avg_sq_absmax);
    }
  }
  return out;
}

void AdamW8bit::load_state_tensors(const std::map<std::string, at::Tensor>& state, const std::string& source) {
  const auto n = params_.size();
  const std::string expected =
      c10::str("expected 'step', 'exp_avg.<i>' and 'exp_avg_sq.<i>' for i = 0 .. ",
               n - 1,
               " (the optimizer has ",
               n,
               " parameters), and 'exp_avg_absmax.<i>' and 'exp_avg_sq_absmax.<i>' for parameters of ",
               kMin8bitNumel,
               " elements or more");
  const int64_t steps = load_step(state, source, expected);
  std::vector<std::string> known{"step"};
  std::vector<Moments> loaded(n);
  // A copy of state[key] with the dtype and shape this parameter's state has.
  const auto take = [&](const std::string& key, const at::Tensor& like) {
    const auto& t = find_state(state, key, source, expected);
    TORCH_CHECK(t.scalar_type() == like.scalar_type(),
                source,
                ": the optimizer state '",
                key,
                "' is ",
                t.scalar_type(),
                "; expected ",
                like.scalar_type(),
                " (AdamW8bit keeps uint8 codes for parameters of ",
                kMin8bitNumel,
                " elements or more, float32 moments for smaller ones)");
    TORCH_CHECK(t.sizes() == like.sizes(),
                source,
                ": the optimizer state '",
                key,
                "' has shape ",
                t.sizes(),
                " but this run's has shape ",
                like.sizes(),
                " (saved by a run with another LoRA rank or targets?)");
    known.push_back(key);
    return at::empty_like(like).copy_(t);
  };
  for (size_t i = 0; i < n; ++i) {
    const auto index = std::to_string(i);
    const auto& s = state_[i];
    loaded[i].exp_avg = take("exp_avg." + index, s.exp_avg);
    loaded[i].exp_avg_sq = take("exp_avg_sq." + index, s.exp_avg_sq);
    if (is_8bit(i)) {
      loaded[i].exp_avg_absmax = take("exp_avg_absmax." + index, s.exp_avg_absmax);
      loaded[i].exp_avg_sq_absmax = take("exp_avg_sq_absmax." + index, s.exp_avg_sq_absmax);
    }
  }
  check_no_extra_keys(state, known, source, expected);
  state_ = std::move(loaded);
  step_ = steps;
}

}  // namespace qtrain::engine::train
