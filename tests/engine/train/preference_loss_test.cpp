// Note [KTO loss]: KTO's loss and metrics on hand-made log-likelihoods, against the formulas
// computed one row at a time in double: a negative KL estimate clamped to 0, a positive one
// entering both kinds of rows, unequal weights over the mean of all rows, a micro-batch without
// undesirable rows (its metrics' counts 0), and the gradients' signs.
#include "engine/train/preference_loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace qtrain::engine::train {
namespace {

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

at::Tensor floats(const std::vector<double>& v) {
  return at::tensor(v, at::kDouble).to(at::kFloat);
}

TEST(KtoLoss, RowsWeighTheirSigmoidOfTheLogRatioAgainstTheClampedKl) {
  const KtoOptions o{0.1, 1.3, 0.7};
  const std::vector<bool> desirable = {true, false, true};
  const std::vector<double> logps = {-10, -12, -8}, ref = {-11, -11, -8.5};
  for (const double kl_shift : {-1.0, 1.0}) {
    SCOPED_TRACE(kl_shift);
    // The KL rows' log-ratios average to kl_shift: -1 clamps to 0.
    const auto kl_logps = floats({-7 + kl_shift, -7 + kl_shift, -7 + kl_shift});
    auto policy = floats(logps).set_requires_grad(true);
    const auto r = kto_loss(policy, floats(ref), kl_logps, floats({-7, -7, -7}), desirable, o);
    const double kl = std::max(0.0, kl_shift);
    double expected = 0;
    for (size_t i = 0; i < 3; ++i) {
      const double ratio = logps[i] - ref[i];
      expected += desirable[i] ? o.desirable_weight * (1 - sigmoid(o.beta * (ratio - kl)))
                               : o.undesirable_weight * (1 - sigmoid(o.beta * (kl - ratio)));
    }
    EXPECT_NEAR(r.loss.item<double>(), expected / 3, 1e-6);
    const auto m = r.metrics.to(at::kDouble);
    EXPECT_NEAR(m[0].item<double>(), kl, 1e-6);
    EXPECT_NEAR(m[1].item<double>(), o.beta * (1 + 0.5) / 2, 1e-6);  // rewards/chosen
    EXPECT_NEAR(m[2].item<double>(), o.beta * -1, 1e-6);             // rewards/rejected
    EXPECT_NEAR(m[3].item<double>(), o.beta * (0.75 + 1), 1e-6);     // rewards/margins
    EXPECT_NEAR(m[4].item<double>(), -9, 1e-6);                      // logps/chosen
    EXPECT_NEAR(m[5].item<double>(), -12, 1e-6);                     // logps/rejected
    EXPECT_TRUE(at::equal(r.counts, at::ones({6}))) << r.counts;
    r.loss.backward();
    const auto g = policy.grad();
    EXPECT_LT(g[0].item<double>(), 0) << "a desirable row's likelihood is raised";
    EXPECT_GT(g[1].item<double>(), 0) << "an undesirable row's is lowered";
    EXPECT_LT(g[2].item<double>(), 0);
    // The KL term takes no gradient, as TRL's (its rows run under no gradient and it is detached).
    const double s = sigmoid(o.beta * (logps[0] - ref[0] - kl));
    EXPECT_NEAR(g[0].item<double>(), -o.desirable_weight / 3 * o.beta * s * (1 - s), 1e-7);
  }
  // Without undesirable rows: their metrics count 0 and add nothing, the loss is the desirable mean.
  const auto r =
      kto_loss(floats(logps), floats(ref), floats({-7, -7, -7}), floats({-7, -7, -7}), {true, true, true}, o);
  EXPECT_TRUE(at::equal(r.counts, floats({1, 1, 0, 0, 1, 0}))) << r.counts;
  EXPECT_EQ(r.metrics[2].item<float>(), 0.0F);
  double expected = 0;
  for (size_t i = 0; i < 3; ++i) expected += o.desirable_weight * (1 - sigmoid(o.beta * (logps[i] - ref[i])));
  EXPECT_NEAR(r.loss.item<double>(), expected / 3, 1e-6);
}

}  // namespace
}  // namespace qtrain::engine::train
