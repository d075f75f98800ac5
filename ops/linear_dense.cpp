// See linear_dense.h and Note [Decoding products on the CPU] there.
#include "ops/linear_dense.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace qtrain::ops {

at::Tensor linear_dense(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  const int64_t in = x.size(-1), out = weight.size(0);
  const int64_t rows = in == 0 ? 0 : x.numel() / in;
  const int64_t threads = at::get_num_threads();
  const bool grad =
      at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || (bias && bias->requires_grad()));
  if (!x.is_cpu() || grad || threads < 2 || rows == 0 || rows > kMaxRows || weight.numel() < kMinElements ||
      at::in_parallel_region()) {
    return at::linear(x, weight, bias);
  }
  const auto x2 = x.reshape({rows, in}).contiguous();
  auto y = at::empty({rows, out}, x.options());
  const int64_t block = (out + threads - 1) / threads;
  at::parallel_for(0, out, block, [&](int64_t begin, int64_t end) {
    const auto b = bias ? std::optional<at::Tensor>(bias->narrow(0, begin, end - begin)) : std::nullopt;
    y.narrow(1, begin, end - begin).copy_(at::linear(x2, weight.narrow(0, begin, end - begin), b));
  });
  auto shape = x.sizes().vec();
  shape.back() = out;
  return y.view(shape);
}

}  // namespace qtrain::ops
