// See rms_norm.h.
#include "ops/nn/rms_norm.h"

#include <ATen/ATen.h>

namespace qtrain::ops {
namespace {

void check_weight(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1),
              "rms_norm: weight has shape ",
              weight.sizes(),
              " but x has ",
              x.size(-1),
              " features");
}

// x / rms(x) in float32.
at::Tensor normalized(const at::Tensor& x, double eps) {
  const auto xf = x.to(at::kFloat);
  return xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_weight(x, weight);
  return weight.to(x.scalar_type()) * normalized(x, eps).to(x.scalar_type());
}

at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_weight(x, weight);
  return (normalized(x, eps) * (1.0 + weight.to(at::kFloat))).to(x.scalar_type());
}

at::Tensor gemma4_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto xf = x.to(at::kFloat);
  auto y = xf * at::pow(xf.pow(2).mean(-1, /*keepdim=*/true) + eps, -0.5);
  if (weight.defined()) {
    check_weight(x, weight);
    y = y * weight.to(at::kFloat);
  }
  return y.to(x.scalar_type());
}

}  // namespace qtrain::ops
