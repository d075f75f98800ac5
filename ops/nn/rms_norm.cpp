// See rms_norm.h.
#include "ops/nn/rms_norm.h"

#include <ATen/ATen.h>

namespace qtrain::ops {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1),
              "rms_norm: weight has shape ",
              weight.sizes(),
              " but x has ",
              x.size(-1),
              " features");
  const auto xf = x.to(at::kFloat);
  const auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

}  // namespace qtrain::ops
