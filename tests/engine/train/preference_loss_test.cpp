// Note [KTO loss]: KTO's loss and metrics on hand-made log-likelihoods, against the formulas
// computed one row at a time in double: a negative KL estimate clamped to 0, a positive one
// entering both kinds of rows, unequal weights over the mean of all rows, a micro-batch without
// undesirable rows (its metrics' counts 0), and the gradients' signs. Note [DPO loss]'s
// variations likewise: the f-divergences' scores, WPO's pair weights, sft's unweighted chosen rows.
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

double log_sigmoid(double x) {
  return -std::log1p(std::exp(-x));
}

// Two pairs whose log-ratios are 0.5 and -0.25 (chosen), -1 and 0.75 (rejected), 3 tokens each.
PairLogps two_pairs() {
  return {floats({-10, -12}),
          floats({-14, -9}),
          floats({-10.5, -11.75}),
          floats({-13, -9.75}),
          floats({3, 3}),
          floats({3, 3}),
          floats({2, 2})};
}

// f-DPO: the sigmoid loss between the scores of the log-ratios, and IPO's per-token difference of
// them; reverse_kl, and alpha_divergence at a = 1, are DPO; alpha_divergence's exponent is capped.
TEST(DpoLoss, FDivergencesScoreTheLogRatiosBeforeTheLosses) {
  const std::vector<double> chosen = {0.5, -0.25}, rejected = {-1, 0.75};
  const double beta = 0.1, a = 0.3;
  const auto score = [&](FDivergence f, double u) {
    switch (f) {
      case FDivergence::reverse_kl:
        return u;
      case FDivergence::forward_kl:
        return 1 - std::exp(-u);
      case FDivergence::js_divergence:
        return std::log(2.0) + log_sigmoid(u);
      case FDivergence::alpha_divergence:
        return (std::exp((a - 1) * u) - 1) / (a - 1);
    }
    return 0.0;
  };
  for (const auto f :
       {FDivergence::reverse_kl, FDivergence::forward_kl, FDivergence::js_divergence, FDivergence::alpha_divergence}) {
    SCOPED_TRACE(static_cast<int>(f));
    DpoOptions o;
    o.f_divergence = f;
    o.f_alpha_divergence_coef = a;
    o.losses = {{DpoLoss::sigmoid, 1.0}, {DpoLoss::ipo, 0.5}};
    double sigmoid_loss = 0, ipo_loss = 0;
    for (size_t i = 0; i < 2; ++i) {
      const double d = score(f, chosen[i]) - score(f, rejected[i]);
      sigmoid_loss += -log_sigmoid(beta * d) / 2;
      ipo_loss += std::pow(d / 3 - 1 / (2 * beta), 2) / 2;
    }
    EXPECT_NEAR(dpo_loss(two_pairs(), o).loss.item<double>(), sigmoid_loss + 0.5 * ipo_loss, 1e-4);
  }
  DpoOptions dpo, unit_alpha;
  unit_alpha.f_divergence = FDivergence::alpha_divergence;
  unit_alpha.f_alpha_divergence_coef = 1.0;
  EXPECT_EQ(dpo_loss(two_pairs(), unit_alpha).loss.item<float>(), dpo_loss(two_pairs(), dpo).loss.item<float>());
  // A chosen log-ratio of -200: (a - 1) * logratio = 140 is capped at 80, so the score, and the
  // loss (about -beta times the difference of the scores), stay finite in float32.
  auto far = two_pairs();
  far.ref_chosen = far.chosen + 200;
  DpoOptions alpha;
  alpha.f_divergence = FDivergence::alpha_divergence;
  alpha.f_alpha_divergence_coef = a;
  const double capped_score = (std::exp(80.0) - 1) / (a - 1);
  double expected = 0;
  for (size_t i = 0; i < 2; ++i) {
    expected += -beta * (capped_score - score(FDivergence::alpha_divergence, rejected[i])) / 2;
  }
  const auto capped = dpo_loss(far, alpha).loss.item<double>();
  EXPECT_TRUE(std::isfinite(capped));
  EXPECT_NEAR(capped, expected, 1e-4 * expected);
}

// WPO: each pair's loss, of every configured loss, times its weight before the mean; the metrics
// unweighted. sft reads chosen_sft where it is given (LD-DPO's unweighted chosen rows).
TEST(DpoLoss, WpoWeighsEachPairsLossAndSftReadsTheUnweightedChosenRows) {
  DpoOptions o;
  o.losses = {{DpoLoss::sigmoid, 1.0}, {DpoLoss::hinge, 0.5}};
  auto p = two_pairs();
  const auto plain = dpo_loss(p, o);
  p.weights = floats({0.25, 0.8});
  const auto weighted = dpo_loss(p, o);
  double expected = 0;
  const std::vector<double> delta = {1.5, -1.0}, w = {0.25, 0.8};
  for (size_t i = 0; i < 2; ++i) {
    expected += w[i] * (-log_sigmoid(0.1 * delta[i]) + 0.5 * std::max(0.0, 1 - 0.1 * delta[i])) / 2;
  }
  EXPECT_NEAR(weighted.loss.item<double>(), expected, 1e-5);
  EXPECT_GT(std::abs(plain.loss.item<double>() - expected), 0.1);
  EXPECT_TRUE(at::equal(weighted.metrics, plain.metrics));
  DpoOptions sft;
  sft.losses = {{DpoLoss::sft, 1.0}};
  p = two_pairs();
  EXPECT_NEAR(dpo_loss(p, sft).loss.item<double>(), 22.0 / 4, 1e-5);  // -(-10 - 12) over 4 predicted tokens
  p.chosen_sft = floats({-11, -13});
  EXPECT_NEAR(dpo_loss(p, sft).loss.item<double>(), 24.0 / 4, 1e-5);
}

}  // namespace
}  // namespace qtrain::engine::train
