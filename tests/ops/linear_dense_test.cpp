// linear_dense (Note [Decoding products on the CPU]): a decoding step's few rows, split over
// threads by output features, give at::linear's values; with autograd it is at::linear.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "ops/linear_dense.h"

namespace qtrain::ops {
namespace {

TEST(LinearDense, FewRowsWithoutAutogradEqualAtLinear) {
  at::manual_seed(0);
  const auto w = at::randn({1027, 300});  // over kMinElements; 1027 rows split unevenly
  const auto bias = at::randn({1027});
  ASSERT_GE(w.numel(), kMinElements);
  for (const int64_t rows : {int64_t{1}, int64_t{3}, kMaxRows}) {
    const auto x = at::randn({rows, 1, 300});
    at::NoGradGuard no_grad;
    const auto ours = linear_dense(x, w, bias);
    const auto theirs = at::linear(x, w, bias);
    ASSERT_EQ(ours.sizes(), theirs.sizes());
    // The same kernel over each block of rows of W: equal up to that kernel's blocking of the
    // inner dimension, which may differ with the matrix size (float32 rounding).
    EXPECT_TRUE(at::allclose(ours, theirs, 1e-6, 1e-5)) << rows << " rows";
    EXPECT_TRUE(at::allclose(linear_dense(x, w, std::nullopt), at::linear(x, w, std::nullopt), 1e-6, 1e-5));
  }
  // Threads or not, the result does not depend on their count beyond that rounding.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto x = at::randn({2, 300});
  at::Tensor one;
  {
    at::NoGradGuard no_grad;
    one = linear_dense(x, w, bias);
  }
  at::set_num_threads(threads);
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::allclose(linear_dense(x, w, bias), one, 1e-6, 1e-5));
}

TEST(LinearDense, WithAutogradItIsAtLinear) {
  at::manual_seed(1);
  const auto w = at::randn({1027, 300});
  const auto x = at::randn({1, 300}).requires_grad_(true);
  const auto y = linear_dense(x, w, std::nullopt);
  ASSERT_TRUE(y.requires_grad());
  EXPECT_TRUE(at::equal(y, at::linear(x, w, std::nullopt)));
  y.sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), w.sum(0).unsqueeze(0), 1e-4, 1e-4));
}

}  // namespace
}  // namespace qtrain::ops
