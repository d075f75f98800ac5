// Tests for engine/lora/lora_config.h and lora_linear: scaling (plain and rsLoRA), PEFT's
// target-module matching, validation messages, PEFT's initialisation (bound, statistics, B = 0),
// the forward delta against a hand-written reference with its gradients, dropout, and the merged
// weight. Bit-exactness against torch's kaiming_uniform_ and PEFT's own forward is checked in
// tests/engine/io/peft_adapter_test.cpp, which runs peft.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"
#include "tests/expect_error.h"

namespace qtrain::engine::lora {
namespace {

using test::expect_error;

LoraConfig config_with(int64_t r, double alpha, double dropout = 0.0) {
  LoraConfig c;
  c.r = r;
  c.alpha = alpha;
  c.dropout = dropout;
  c.target_modules = {"q_proj", "v_proj"};
  return c;
}

// An adapter with non-zero B (a fresh one is a no-op, which would hide mistakes).
LoraAdapter random_adapter(int64_t in, int64_t out, const LoraConfig& c, uint64_t seed) {
  LoraAdapter ad = lora_init(in, out, c, seed);
  at::NoGradGuard no_grad;
  ad.b.normal_(0, 1, at::make_generator<at::CPUGeneratorImpl>(seed + 1));
  return ad;
}

TEST(LoraConfigTest, ScalingIsAlphaOverR) {
  EXPECT_EQ(config_with(8, 16).scaling(), 2.0);
  EXPECT_EQ(config_with(16, 8).scaling(), 0.5);
  EXPECT_EQ(config_with(3, 1).scaling(), 1.0 / 3.0);
}

TEST(LoraConfigTest, RsLoraScalingIsAlphaOverSqrtR) {
  LoraConfig c = config_with(16, 8);
  c.use_rslora = true;
  EXPECT_EQ(c.scaling(), 2.0);
  c.r = 6;
  c.alpha = 12;
  EXPECT_EQ(c.scaling(), 12 / std::sqrt(6.0));  // the same double PEFT's lora_alpha / math.sqrt(r) gives
}

TEST(LoraConfigTest, TargetMatchingFollowsPeftRules) {
  LoraConfig c;
  c.target_modules = {"q_proj", "mlp.down_proj", "model.layers.1.self_attn.o_proj"};
  struct Case {
    const char* module;
    bool expected;
  };
  const Case cases[] = {
      {"model.layers.0.self_attn.q_proj", true},    // ends with "." + entry
      {"q_proj", true},                             // equals the entry
      {"model.layers.0.self_attn.xq_proj", false},  // a suffix, but not a whole component
      {"model.layers.0.self_attn.q_proj.lora", false},
      {"model.layers.0.mlp.down_proj", true},  // dotted entries match dotted suffixes
      {"model.layers.0.down_proj", false},
      {"model.layers.0.xmlp.down_proj", false},
      {"mlp.down_proj", true},
      {"model.layers.1.self_attn.o_proj", true},  // a full path matches itself
      {"model.layers.0.self_attn.o_proj", false},
      {"model.layers.0.self_attn.k_proj", false},
      {"", false},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(c.targets(k.module), k.expected) << k.module;
  }
}

TEST(LoraConfigTest, AllLinearTargetsEveryLinearButTheHead) {
  LoraConfig c;
  c.target_all_linear = true;
  EXPECT_TRUE(c.targets("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(c.targets("model.layers.3.mlp.gate_proj"));
  EXPECT_TRUE(c.targets("model.layers.3.block_sparse_moe.experts.0.w1"));
  EXPECT_FALSE(c.targets("lm_head"));
  EXPECT_FALSE(c.targets("model.lm_head"));
  EXPECT_TRUE(c.targets("model.not_lm_head"));
  // With an explicit list as well, a module matching either is targeted; lm_head only by name.
  c.target_modules = {"lm_head"};
  EXPECT_TRUE(c.targets("lm_head"));
}

// PEFT reads a string target_modules as a regular expression the whole module name must match
// (re.fullmatch). The pattern is axolotl's Gemma 4 26B-A4B example's, over the names of a
// multimodal Gemma 4 folder: attention and MLP projections of every layer, with or without FSDP's
// _checkpoint_wrapped_module, and nothing else.
TEST(LoraConfigTest, ARegularExpressionMustMatchTheWholeModuleName) {
  LoraConfig c = config_with(8, 16);
  c.target_modules.clear();
  c.target_modules_regex =
      "model.language_model.layers.[\\d]+.(_checkpoint_wrapped_module.)?(mlp|self_attn).(up|down|gate|q|k|v|o)_proj";
  c.validate("run.yaml");
  for (const char* yes : {"model.language_model.layers.0.self_attn.q_proj",
                          "model.language_model.layers.29.self_attn.o_proj",
                          "model.language_model.layers.3.mlp.down_proj",
                          "model.language_model.layers.3._checkpoint_wrapped_module.mlp.gate_proj"}) {
    EXPECT_TRUE(c.targets(yes)) << yes;
  }
  for (const char* no : {"model.layers.0.self_attn.q_proj",  // not the multimodal name: fullmatch, not search
                         "model.language_model.layers.0.self_attn.q_norm",
                         "model.language_model.layers.0.router.proj",
                         "model.language_model.layers.0.self_attn.q_proj.base_layer",
                         "lm_head"}) {
    EXPECT_FALSE(c.targets(no)) << no;
  }
  // Python syntax that ECMAScript lacks is refused by name, not misread.
  c.target_modules_regex = "(?P<proj>q|v)_proj";
  expect_error([&] { c.validate("run.yaml"); },
               "run.yaml: target_modules '(?P<proj>q|v)_proj' is not a regular expression qtrain can read");
}

TEST(LoraConfigTest, ValidationNamesTheValueAndTheFix) {
  const std::string where = "configs/run.yaml";
  expect_error([&] { config_with(0, 16).validate(where); },
               "configs/run.yaml: LoRA rank r is 0; it must be at least 1");
  expect_error([&] { config_with(-4, 16).validate(where); }, "LoRA rank r is -4");
  expect_error([&] { config_with(8, 0).validate(where); }, "lora_alpha is 0; it must be a positive number");
  expect_error([&] { config_with(8, NAN).validate(where); }, "lora_alpha is nan");
  expect_error([&] { config_with(8, 16, 1.0).validate(where); }, "lora_dropout is 1; it must be in [0, 1)");
  expect_error([&] { config_with(8, 16, -0.1).validate(where); }, "lora_dropout is -0.1");
  LoraConfig none = config_with(8, 16);
  none.target_modules.clear();
  expect_error([&] { none.validate(where); }, "no LoRA target modules; list them");
  none.target_all_linear = true;
  none.validate(where);  // all-linear needs no list
  LoraConfig dotted = config_with(8, 16);
  dotted.target_modules = {".q_proj"};
  expect_error([&] { dotted.validate(where); }, "LoRA target module '.q_proj' is not a module name");
  config_with(1, 0.5, 0.999).validate(where);
}

// peft's get_pattern_key: a key matches the end of a path after a dot (re.match(r"(.*\.)?(KEY)$")),
// the first matching key in order wins, else r and alpha.
TEST(LoraConfigTest, RankAndAlphaPatternsMatchAsPeftDoes) {
  LoraConfig c = config_with(8, 16);
  c.rank_pattern = {{"q_proj", 2}, {"layers\\.1\\..*", 6}, {".*\\.gate_up_proj", 32}};
  c.alpha_pattern = {{"self_attn.k_proj", 3}};
  EXPECT_EQ(c.rank_for("model.layers.0.self_attn.q_proj"), 2);
  EXPECT_EQ(c.rank_for("model.layers.1.self_attn.q_proj"), 2) << "the first key that matches wins";
  EXPECT_EQ(c.rank_for("model.layers.1.self_attn.k_proj"), 6);
  EXPECT_EQ(c.rank_for("model.layers.0.self_attn.k_proj"), 8);
  EXPECT_EQ(c.rank_for("model.layers.0.mlp.experts.gate_up_proj"), 32);
  EXPECT_EQ(c.rank_for("model.layers.0.self_attn.xq_proj"), 8) << "a key matches after a dot only";
  EXPECT_EQ(c.rank_for("q_proj"), 2) << "or the whole path";
  EXPECT_EQ(c.rank_for("model.layers.0.self_attn.q_proj.lora"), 8) << "and to its end";
  EXPECT_EQ(c.alpha_for("model.layers.3.self_attn.k_proj"), 3);
  EXPECT_EQ(c.alpha_for("model.layers.3.self_attn.v_proj"), 16);
  const LoraConfig k = c.for_module("model.layers.1.self_attn.k_proj");
  EXPECT_EQ(k.r, 6);
  EXPECT_EQ(k.alpha, 3);
  EXPECT_EQ(k.scaling(), 0.5);
  EXPECT_TRUE(k.rank_pattern.empty() && k.alpha_pattern.empty());
  c.use_rslora = true;
  EXPECT_EQ(c.for_module("model.layers.0.self_attn.q_proj").scaling(), 16 / std::sqrt(2.0));

  LoraConfig bad = config_with(8, 16);
  bad.rank_pattern = {{"q_proj", 0}};
  expect_error([&] { bad.validate("a"); }, "a: rank_pattern gives 'q_proj' the rank 0; it must be at least 1");
  bad.rank_pattern = {{"(?<=x)q", 4}};
  expect_error([&] { bad.validate("a"); }, "a: the rank_pattern key '(?<=x)q' is not a regular expression");
  bad.rank_pattern.clear();
  bad.alpha_pattern = {{"q_proj", -1}};
  expect_error([&] { bad.validate("a"); }, "a: alpha_pattern gives 'q_proj' the alpha -1");
}

TEST(LoraInitTest, MatchesPeftInitialisation) {
  const LoraConfig c = config_with(16, 32, 0.05);
  const int64_t in = 1024, out = 384;
  const LoraAdapter ad = lora_init(in, out, c, 1234);
  EXPECT_EQ(ad.a.sizes(), (std::vector<int64_t>{16, in}));
  EXPECT_EQ(ad.b.sizes(), (std::vector<int64_t>{out, 16}));
  EXPECT_EQ(ad.a.scalar_type(), at::kFloat);
  EXPECT_EQ(ad.b.scalar_type(), at::kFloat);
  EXPECT_TRUE(ad.a.requires_grad() && ad.a.is_leaf());
  EXPECT_TRUE(ad.b.requires_grad() && ad.b.is_leaf());
  EXPECT_EQ(ad.scaling, 2.0);
  EXPECT_EQ(ad.dropout, 0.05);
  EXPECT_EQ(ad.rank(), 16);
  EXPECT_EQ(ad.in_features(), in);
  EXPECT_EQ(ad.out_features(), out);

  // B = 0: a fresh adapter changes nothing.
  EXPECT_TRUE(at::equal(ad.b, at::zeros_like(ad.b)));
  // kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), std gain/sqrt(in), bound sqrt(3)*std = 1/sqrt(in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  const at::Tensor a = ad.a.detach().to(at::kDouble);
  const double max_abs = a.abs().max().item<double>();
  EXPECT_LE(max_abs, static_cast<float>(bound) * (1 + 1e-6));
  EXPECT_GT(max_abs, 0.99 * bound);  // 16k draws reach the edge
  // U(-b, b): mean 0 (sd of the mean b/sqrt(3n)), variance b^2/3.
  const double n = static_cast<double>(a.numel());
  EXPECT_LT(std::abs(a.mean().item<double>()), 5 * bound / std::sqrt(3 * n));
  EXPECT_NEAR(a.var().item<double>() / (bound * bound / 3), 1.0, 0.05);
  EXPECT_NEAR((a < 0).to(at::kDouble).mean().item<double>(), 0.5, 0.02);
}

TEST(LoraInitTest, SeedReproducesAndGeneratorAdvances) {
  const LoraConfig c = config_with(4, 8);
  EXPECT_TRUE(at::equal(lora_init(64, 32, c, 7).a, lora_init(64, 32, c, 7).a));
  EXPECT_FALSE(at::equal(lora_init(64, 32, c, 7).a, lora_init(64, 32, c, 8).a));
  // One generator for several layers gives different A's, and the same sequence again from the
  // same seed.
  auto draw_two = [&](uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    LoraAdapter first = lora_init(64, 32, c, gen);
    LoraAdapter second = lora_init(64, 32, c, gen);
    return std::make_pair(first.a, second.a);
  };
  const auto [a1, a2] = draw_two(3);
  const auto [b1, b2] = draw_two(3);
  EXPECT_FALSE(at::equal(a1, a2));
  EXPECT_TRUE(at::equal(a1, b1));
  EXPECT_TRUE(at::equal(a2, b2));
  // The seed overload is a fresh generator with that seed.
  EXPECT_TRUE(at::equal(a1, lora_init(64, 32, c, 3).a));
}

TEST(LoraInitTest, RejectsBadSizesAndConfigs) {
  expect_error([] { lora_init(0, 32, config_with(4, 8), 1); }, "layer sizes in=0 out=32 must be positive");
  expect_error([] { lora_init(64, 32, config_with(0, 8), 1); }, "LoRA rank r is 0");
}

TEST(LoraDeltaTest, EqualsTheManualReference) {
  const LoraConfig c = config_with(4, 12);
  const LoraAdapter ad = random_adapter(48, 40, c, 11);
  at::manual_seed(0);
  const at::Tensor x = at::randn({2, 5, 48});
  const at::Tensor delta = lora_delta(x, ad, /*training=*/false);
  EXPECT_EQ(delta.sizes(), (std::vector<int64_t>{2, 5, 40}));
  EXPECT_EQ(delta.scalar_type(), at::kFloat);

  // In double: x A^T B^T * scaling, with scaling alpha/r = 3.
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor expected =
      at::matmul(at::matmul(xd, ad.a.detach().to(at::kDouble).t()), ad.b.detach().to(at::kDouble).t()) * 3.0;
  EXPECT_TRUE(at::allclose(delta.to(at::kDouble), expected, 1e-5, 1e-5));
  // And the same op order as PEFT in fp32 (lora_B(lora_A(x)) * scaling): bit for bit.
  const at::Tensor same_order = at::linear(at::linear(x, ad.a), ad.b) * 3.0;
  EXPECT_TRUE(at::equal(delta, same_order));
}

TEST(LoraDeltaTest, FreshAdapterIsANoOp) {
  const LoraAdapter ad = lora_init(32, 16, config_with(8, 16), 5);
  const at::Tensor x = at::randn({3, 32});
  EXPECT_TRUE(at::equal(lora_delta(x, ad, false), at::zeros({3, 16})));
}

TEST(LoraDeltaTest, GradientsReachAAndB) {
  const LoraConfig c = config_with(4, 8);
  const LoraAdapter ad = random_adapter(24, 20, c, 21);
  at::manual_seed(1);
  const at::Tensor x = at::randn({6, 24}).set_requires_grad(true);
  const at::Tensor g = at::randn({6, 20});
  (lora_delta(x, ad, false) * g).sum().backward();
  ASSERT_TRUE(ad.a.grad().defined());
  ASSERT_TRUE(ad.b.grad().defined());
  // d/dA = s B^T g^T x, d/dB = s g^T (x A^T), d/dx = s g B A.
  const double s = c.scaling();
  const at::Tensor a = ad.a.detach(), b = ad.b.detach(), xv = x.detach();
  EXPECT_TRUE(at::allclose(ad.a.grad(), s * at::matmul(at::matmul(b.t(), g.t()), xv), 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(ad.b.grad(), s * at::matmul(g.t(), at::matmul(xv, a.t())), 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(x.grad(), s * at::matmul(at::matmul(g, b), a), 1e-5, 1e-5));
  EXPECT_GT(ad.a.grad().abs().sum().item<double>(), 0);
}

// See Note [LoRA numerics]: the LoRA path runs in fp32 and the result is returned in x's dtype.
TEST(LoraDeltaTest, Bf16InputComputesInFp32AndReturnsBf16) {
  const LoraAdapter ad = random_adapter(64, 32, config_with(8, 16), 31);
  const at::Tensor x = at::randn({7, 64}).to(at::kBFloat16);
  const at::Tensor delta = lora_delta(x, ad, false);
  EXPECT_EQ(delta.scalar_type(), at::kBFloat16);
  const at::Tensor fp32 = at::linear(at::linear(x.to(at::kFloat), ad.a), ad.b) * ad.scaling;
  EXPECT_TRUE(at::equal(delta, fp32.to(at::kBFloat16)));
  // Gradients land on the fp32 adapter weights.
  delta.to(at::kFloat).sum().backward();
  EXPECT_EQ(ad.a.grad().scalar_type(), at::kFloat);
  EXPECT_EQ(ad.b.grad().scalar_type(), at::kFloat);
}

TEST(LoraDeltaTest, DropoutOnlyInTrainingAndReplayableFromTheDefaultGenerator) {
  const LoraAdapter ad = random_adapter(64, 32, config_with(8, 16, 0.5), 41);
  const at::Tensor x = at::randn({16, 64});
  const at::Tensor eval = lora_delta(x, ad, /*training=*/false);
  EXPECT_TRUE(at::equal(eval, at::linear(at::linear(x, ad.a), ad.b) * ad.scaling));

  at::manual_seed(99);
  const at::Tensor train1 = lora_delta(x, ad, /*training=*/true);
  at::manual_seed(99);
  const at::Tensor train2 = lora_delta(x, ad, /*training=*/true);
  EXPECT_FALSE(at::equal(train1, eval));
  EXPECT_TRUE(at::equal(train1, train2));  // the mask comes from the default generator
  // Exactly nn.Dropout on the input: the same mask from the same seed, scaled by 1/(1-p).
  at::manual_seed(99);
  const at::Tensor dropped = at::dropout(x, 0.5, true);
  EXPECT_TRUE(at::equal(train1, at::linear(at::linear(dropped, ad.a), ad.b) * ad.scaling));

  // dropout 0 in training is nn.Identity: same result and no random draw.
  LoraAdapter no_dropout = ad;
  no_dropout.dropout = 0.0;
  at::manual_seed(5);
  EXPECT_TRUE(at::equal(lora_delta(x, no_dropout, true), eval));
  const at::Tensor after = at::rand({4});
  at::manual_seed(5);
  EXPECT_TRUE(at::equal(after, at::rand({4})));
}

TEST(LoraDeltaTest, RejectsMismatchedInput) {
  const LoraAdapter ad = lora_init(64, 32, config_with(8, 16), 1);
  expect_error(
      [&] {
        lora_delta(at::randn({3, 63}), ad, false);
      },
      "lora_delta: input has shape [3, 63] but the adapter's A is [8, 64]; the last input dimension "
      "must be in_features = 64");
  LoraAdapter bad = ad;
  bad.b = at::zeros({32, 4});
  expect_error([&] { lora_delta(at::randn({3, 64}), bad, false); }, "LoRA adapter shapes do not fit");
}

TEST(LoraMergeTest, MergedWeightReproducesBasePlusDelta) {
  const LoraConfig c = config_with(8, 16);
  const LoraAdapter ad = random_adapter(48, 40, c, 51);
  const at::Tensor w = at::randn({40, 48});
  const at::Tensor merged = lora_merged_weight(w, ad);
  EXPECT_EQ(merged.scalar_type(), at::kFloat);
  EXPECT_FALSE(merged.requires_grad());
  const at::Tensor x = at::randn({9, 48});
  EXPECT_TRUE(at::allclose(at::linear(x, merged), at::linear(x, w) + lora_delta(x, ad, false), 1e-4, 1e-4));
  // W + s B A exactly as PEFT computes it.
  EXPECT_TRUE(at::equal(merged, w + at::matmul(ad.b.detach(), ad.a.detach()) * ad.scaling));
  // A fresh adapter merges to the base weight.
  EXPECT_TRUE(at::equal(lora_merged_weight(w, lora_init(48, 40, c, 1)), w));
}

TEST(LoraMergeTest, Bf16BaseIsRoundedOnceAfterTheFp32Add) {
  const LoraAdapter ad = random_adapter(48, 40, config_with(8, 16), 61);
  const at::Tensor w = at::randn({40, 48}).to(at::kBFloat16);
  const at::Tensor merged = lora_merged_weight(w, ad);
  EXPECT_EQ(merged.scalar_type(), at::kBFloat16);
  const at::Tensor delta = at::matmul(ad.b.detach(), ad.a.detach()) * ad.scaling;
  EXPECT_TRUE(at::equal(merged, (w.to(at::kFloat) + delta).to(at::kBFloat16)));
  expect_error(
      [&] {
        lora_merged_weight(at::zeros({48, 40}), ad);
      },
      "lora_merged_weight: base weight has shape [48, 40] but the adapter is for [out, in] = [40, 48]");
}

}  // namespace
}  // namespace qtrain::engine::lora
