// See clip_grad.h.
#include "engine/train/clip_grad.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace qtrain::engine::train {
namespace {

std::vector<at::Tensor> defined_grads(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

}  // namespace

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  const auto grads = defined_grads(params);
  if (grads.empty()) return at::zeros({}, at::kFloat);
  // The per-tensor norms as one multi-tensor operator (torch's foreach path computes these the
  // same way: its CPU fallback is linalg_vector_norm per tensor).
  const auto total_norm = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
  if (max_norm > 0) {
    // Python's `max_norm / (total_norm + 1e-6)` is Tensor.__rtruediv__: reciprocal, then multiply.
    const auto clip_coef = at::reciprocal(total_norm + 1e-6) * max_norm;
    const auto clip_coef_clamped = at::clamp(clip_coef, std::optional<at::Scalar>(), std::optional<at::Scalar>(1.0));
    // Multiplied even when the coefficient is 1 (exact), as torch does: no branch on the value.
    at::_foreach_mul_(grads, clip_coef_clamped);
  }
  return total_norm;
}

at::Tensor grads_finite(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  const auto grads = defined_grads(params);
  if (grads.empty()) return at::ones({}, at::kBool);
  // AMP's multi-tensor check: sets `found` to 1 where a grad holds a NaN or an infinity, and
  // multiplies the grads by 1 (exact: every value, NaN and infinities included, stays as it was).
  auto found = at::zeros({1}, grads.front().options());
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found, at::ones({1}, grads.front().options()));
  return found.squeeze(0) == 0;
}

}  // namespace qtrain::engine::train
