// Gradient clipping and the finite check. Bitwise parity with torch.nn.utils.clip_grad_norm_ is
// tested with the optimizer (AdamWParity in adamw_test.cpp: the norm of each of 25 steps, and
// the clipped grads through the parameters); these pin the behaviour around it.
#include "engine/train/clip_grad.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/reference.h"

namespace qtrain::engine::train {
namespace {

using test::bitwise_equal;

at::Tensor param_with_grad(const at::Tensor& grad) {
  auto p = at::zeros_like(grad).requires_grad_(true);
  p.mutable_grad() = grad.clone();
  return p;
}

// clip_grad_norm's norm, read.
double clip(const std::vector<at::Tensor>& params, double max_norm) {
  return clip_grad_norm(params, max_norm).item<double>();
}

TEST(ClipGrad, ScalesGradsDownToMaxNormAndReturnsTheNormBefore) {
  // Norms 5 and 12: total sqrt(25 + 144) = 13.
  const std::vector<at::Tensor> params{param_with_grad(at::tensor({3.0f, 4.0f})),
                                       param_with_grad(at::tensor({12.0f, 0.0f, 0.0f}).reshape({3, 1}))};
  EXPECT_EQ(clip(params, 2.0), 13.0);
  // torch's coefficient: max_norm / (norm + 1e-6).
  const double coef = 2.0 / (13.0 + 1e-6);
  EXPECT_NEAR(params[0].grad()[1].item<double>(), 4.0 * coef, 1e-6);
  EXPECT_NEAR(params[1].grad()[0][0].item<double>(), 12.0 * coef, 1e-6);
  EXPECT_NEAR(clip(params, 0.0), 2.0, 1e-6);
}

TEST(ClipGrad, LeavesGradsBelowMaxNormBitwiseUnchanged) {
  const auto grad = at::randn({5, 7}) * 0.01;
  const std::vector<at::Tensor> params{param_with_grad(grad)};
  const double norm = clip(params, 1.0);
  EXPECT_LT(norm, 1.0);
  EXPECT_EQ(static_cast<float>(norm), at::linalg_vector_norm(grad, 2).item<float>());
  EXPECT_TRUE(bitwise_equal(params[0].grad(), grad));
}

TEST(ClipGrad, ZeroMaxNormOnlyMeasures) {
  const auto grad = at::randn({64}) * 10;
  const std::vector<at::Tensor> params{param_with_grad(grad)};
  EXPECT_GT(clip(params, 0.0), 1.0);
  EXPECT_TRUE(bitwise_equal(params[0].grad(), grad));
  EXPECT_GT(clip(params, -1.0), 1.0);
  EXPECT_TRUE(bitwise_equal(params[0].grad(), grad));
}

TEST(ClipGrad, SkipsUndefinedGrads) {
  const auto without_grad = at::zeros({4}).requires_grad_(true);
  const std::vector<at::Tensor> params{without_grad, param_with_grad(at::tensor({6.0f, 8.0f}))};
  EXPECT_EQ(clip(params, 100.0), 10.0);
  EXPECT_FALSE(without_grad.grad().defined());
  EXPECT_EQ(clip({without_grad}, 1.0), 0.0);
  EXPECT_EQ(clip({}, 1.0), 0.0);
}

TEST(ClipGrad, GradsFiniteFindsInfAndNan) {
  const auto finite = param_with_grad(at::randn({3, 3}));
  const auto no_grad = at::zeros({2}).requires_grad_(true);
  EXPECT_TRUE(grads_finite({finite, no_grad}).item<bool>());
  EXPECT_TRUE(grads_finite({no_grad}).item<bool>());
  EXPECT_TRUE(grads_finite({}).item<bool>());
  for (const float bad : {INFINITY, -INFINITY, NAN}) {
    auto grad = at::randn({10});
    grad[7] = bad;
    EXPECT_FALSE(grads_finite({finite, param_with_grad(grad)}).item<bool>()) << bad;
  }
  // A non-finite grad makes a non-finite norm: the trainer checks before it steps.
  auto grad = at::randn({10});
  grad[0] = INFINITY;
  EXPECT_TRUE(std::isinf(clip({param_with_grad(grad)}, 0.0)));
}

}  // namespace
}  // namespace qtrain::engine::train
