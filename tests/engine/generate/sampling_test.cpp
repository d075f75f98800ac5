// The next-token choice of Note [Sampling] on known distributions: each filter keeps what
// transformers' warper keeps, the penalty scales as its processor does, and draws follow the
// probabilities and repeat with the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "engine/generate/sampling.h"
#include "tests/expect_error.h"

namespace qtrain::engine::generate {
namespace {

// logits of probabilities 0.5, 0.3, 0.15, 0.05, one row.
at::Tensor four() {
  return at::log(at::tensor({0.5, 0.3, 0.15, 0.05}, at::kFloat)).unsqueeze(0);
}

// Which tokens a processed row leaves finite.
std::vector<bool> kept(const at::Tensor& processed) {
  std::vector<bool> out;
  for (int64_t i = 0; i < processed.size(1); ++i) out.push_back(std::isfinite(processed[0][i].item<float>()));
  return out;
}

Sampling sampling(double temperature) {
  Sampling s;
  s.temperature = temperature;
  return s;
}

TEST(Sampling, FiltersKeepWhatTransformersWarpersKeep) {
  const std::vector<std::vector<int64_t>> none = {{}};
  auto s = sampling(1);
  s.top_k = 2;
  EXPECT_EQ(kept(process_logits(four(), none, s)), (std::vector<bool>{true, true, false, false}));
  s = sampling(1);
  s.top_p = 0.75;  // the least likely tokens whose cumulative probability (0.2) is at most 1 - 0.75 go
  EXPECT_EQ(kept(process_logits(four(), none, s)), (std::vector<bool>{true, true, false, false}));
  s.top_p = 0.85;
  EXPECT_EQ(kept(process_logits(four(), none, s)), (std::vector<bool>{true, true, true, false}));
  s = sampling(1);
  s.min_p = 0.25;  // below 0.25 * 0.5 = 0.125
  EXPECT_EQ(kept(process_logits(four(), none, s)), (std::vector<bool>{true, true, true, false}));
  s.min_p = 0.99;  // the most likely always stays
  EXPECT_EQ(kept(process_logits(four(), none, s)), (std::vector<bool>{true, false, false, false}));
  // Temperature divides; greedy leaves the logits alone, warpers included.
  s = sampling(2);
  EXPECT_TRUE(at::allclose(process_logits(four(), none, s), four() / 2));
  s = sampling(0);
  s.top_k = 1;
  EXPECT_TRUE(at::equal(process_logits(four(), none, s), four()));
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  auto logits = at::tensor({2.0f, -1.0f, 3.0f, 0.5f}).unsqueeze(0);
  auto s = sampling(0);
  s.repetition_penalty = 2;
  const auto out = process_logits(logits, {{0, 1, 1}}, s);
  EXPECT_TRUE(at::equal(out, at::tensor({1.0f, -2.0f, 3.0f, 0.5f}).unsqueeze(0))) << out;
  EXPECT_TRUE(at::equal(logits, at::tensor({2.0f, -1.0f, 3.0f, 0.5f}).unsqueeze(0))) << "the input is left alone";
}

TEST(Sampling, DrawsFollowTheProbabilitiesAndRepeatWithTheSeed) {
  const int64_t n = 20000;
  const auto logits = four().expand({n, 4});
  const auto s = sampling(1);
  auto draw = [&](uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    return choose_tokens(process_logits(logits, std::vector<std::vector<int64_t>>(n), s), s, generator);
  };
  const auto tokens = draw(7);
  std::vector<double> freq(4);
  for (const auto t : tokens) freq[t] += 1.0 / n;
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) {
    // Five standard deviations of a binomial frequency over n draws.
    EXPECT_NEAR(freq[i], p[i], 5 * std::sqrt(p[i] * (1 - p[i]) / n)) << "token " << i;
  }
  EXPECT_EQ(draw(7), tokens);
  EXPECT_NE(draw(8), tokens);
  // Greedy is the argmax.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  EXPECT_EQ(choose_tokens(four(), sampling(0), generator), std::vector<int64_t>{0});
}

TEST(Sampling, OutOfRangeValuesAreRefusedByName) {
  auto s = sampling(-1);
  test::expect_error([&] { check_sampling(s); }, "--temperature is -1");
  s = sampling(1);
  s.top_p = 0;
  test::expect_error([&] { check_sampling(s); }, "--top-p is 0");
  s = sampling(1);
  s.min_p = 1;
  test::expect_error([&] { check_sampling(s); }, "--min-p is 1");
  s = sampling(1);
  s.top_k = -2;
  test::expect_error([&] { check_sampling(s); }, "--top-k is -2");
  s = sampling(1);
  s.repetition_penalty = 0;
  test::expect_error([&] { check_sampling(s); }, "--repetition-penalty is 0");
}

}  // namespace
}  // namespace qtrain::engine::generate
