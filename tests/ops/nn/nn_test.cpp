// ops/nn against plain ATen references: chunked cross-entropy (value and gradients, any chunk
// size, ignored labels, soft-capped logits), causal attention with and without a sliding window
// or a soft-cap, both RMSNorms, RoPE.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "ops/nn/attention.h"
#include "ops/nn/cross_entropy.h"
#include "ops/nn/rms_norm.h"
#include "ops/nn/rope.h"
#include "tests/expect_error.h"
#include "tests/tensor_peak.h"

namespace qtrain::ops {
namespace {

TEST(CrossEntropy, ChunkedSumEqualsFullCrossEntropyAndGradients) {
  at::manual_seed(0);
  const auto labels = at::randint(0, 50, {37}, at::kLong);
  labels.narrow(0, 3, 4).fill_(kIgnoreIndex);
  for (int64_t chunk : {1, 5, 16, 37, 1000}) {
    auto h = at::randn({37, 12}).requires_grad_(true);
    auto w = at::randn({50, 12}).requires_grad_(true);
    auto sum = chunked_cross_entropy_sum(h, w, labels, chunk);
    auto h_ref = h.detach().clone().requires_grad_(true);
    auto w_ref = w.detach().clone().requires_grad_(true);
    auto ref = at::cross_entropy_loss(at::matmul(h_ref, w_ref.t()), labels, {}, at::Reduction::Sum, kIgnoreIndex);
    EXPECT_NEAR(sum.item<double>(), ref.item<double>(), 1e-4) << "chunk " << chunk;
    (sum * 0.5).backward();
    (ref * 0.5).backward();
    EXPECT_TRUE(at::allclose(h.grad(), h_ref.grad(), 1e-5, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(at::allclose(w.grad(), w_ref.grad(), 1e-5, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(at::equal(h.grad().narrow(0, 3, 4), at::zeros({4, 12}))) << "ignored tokens get no gradient";
  }
}

// LD-DPO's token weights: each token's loss counts its weight times, in the sum and its gradients.
TEST(CrossEntropy, TokenWeightsScaleEachTokensLossAndGradient) {
  at::manual_seed(1);
  const auto labels = at::randint(0, 30, {23}, at::kLong);
  labels.narrow(0, 5, 2).fill_(kIgnoreIndex);
  const auto weights = at::rand({23});
  for (int64_t chunk : {4, 23}) {
    auto h = at::randn({23, 8}).requires_grad_(true);
    auto w = at::randn({30, 8}).requires_grad_(true);
    auto sum = chunked_cross_entropy_sum(h, w, labels, chunk, std::nullopt, weights);
    auto h_ref = h.detach().clone().requires_grad_(true);
    auto w_ref = w.detach().clone().requires_grad_(true);
    const auto per_token =
        at::cross_entropy_loss(at::matmul(h_ref, w_ref.t()), labels, {}, at::Reduction::None, kIgnoreIndex);
    auto ref = (per_token * weights).sum();
    EXPECT_NEAR(sum.item<double>(), ref.item<double>(), 1e-4) << "chunk " << chunk;
    const auto unweighted = chunked_cross_entropy_sum(h.detach(), w.detach(), labels, chunk);
    EXPECT_GT(std::abs(unweighted.item<double>() - ref.item<double>()), 1.0) << "the weights must matter";
    sum.backward();
    ref.backward();
    EXPECT_TRUE(at::allclose(h.grad(), h_ref.grad(), 1e-5, 1e-6)) << "chunk " << chunk;
    EXPECT_TRUE(at::allclose(w.grad(), w_ref.grad(), 1e-5, 1e-6)) << "chunk " << chunk;
  }
  test::expect_error(
      [&] {
        chunked_cross_entropy_sum(at::randn({23, 8}), at::randn({30, 8}), labels, 4, std::nullopt, at::ones({22}));
      },
      "token_weights must be float32 [23]");
}

TEST(CrossEntropy, SoftcappedChunksEqualCrossEntropyOfCappedLogits) {
  at::manual_seed(2);
  const auto labels = at::randint(0, 40, {29}, at::kLong);
  labels.narrow(0, 10, 3).fill_(kIgnoreIndex);
  for (int64_t chunk : {4, 29}) {
    // Logits of magnitude ~4 against a cap of 2: tanh is far from linear.
    auto h = at::randn({29, 16}).requires_grad_(true);
    auto w = at::randn({40, 16}).requires_grad_(true);
    auto sum = chunked_cross_entropy_sum(h, w, labels, chunk, 2.0);
    auto h_ref = h.detach().clone().requires_grad_(true);
    auto w_ref = w.detach().clone().requires_grad_(true);
    auto capped = at::tanh(at::matmul(h_ref, w_ref.t()) / 2.0) * 2.0;
    auto ref = at::cross_entropy_loss(capped, labels, {}, at::Reduction::Sum, kIgnoreIndex);
    EXPECT_NEAR(sum.item<double>(), ref.item<double>(), 1e-4) << "chunk " << chunk;
    const auto uncapped = chunked_cross_entropy_sum(h.detach(), w.detach(), labels, chunk);
    EXPECT_GT(std::abs(uncapped.item<double>() - ref.item<double>()), 1.0) << "the cap must matter";
    sum.backward();
    ref.backward();
    EXPECT_TRUE(at::allclose(h.grad(), h_ref.grad(), 1e-5, 1e-5)) << "chunk " << chunk;
    EXPECT_TRUE(at::allclose(w.grad(), w_ref.grad(), 1e-5, 1e-5)) << "chunk " << chunk;
  }
  EXPECT_TRUE(at::allclose(softcap_logits(at::tensor({-100.0, 0.5, 3.0}), 2.0),
                           at::tensor({-2.0, 2 * std::tanh(0.25), 2 * std::tanh(1.5)})));
}

// Chunks are sized in bytes up to 1,024 tokens (Note [Loss chunk size]): Gemma's 262,144-token
// vocabulary in bfloat16 with its soft-cap takes 408 tokens a chunk (10 bytes a logit, 0.996
// GiB), Llama 3's 128,256 in bfloat16 the 1,024 tokens (8 bytes: 1,040 would fit), a 32,000
// vocabulary in float32 too; a vocabulary too large for 8 tokens in 1 GiB still gets 8.
TEST(CrossEntropy, ChunksHoldAtMostOneGibibyteOfLogitsWhateverTheVocabulary) {
  EXPECT_EQ(cross_entropy_bytes_per_logit(at::kBFloat16, true), 10);
  EXPECT_EQ(cross_entropy_bytes_per_logit(at::kBFloat16, false), 8);
  EXPECT_EQ(cross_entropy_bytes_per_logit(at::kFloat, true), 12);
  EXPECT_EQ(cross_entropy_bytes_per_logit(at::kFloat, false), 8);
  EXPECT_EQ(cross_entropy_chunk_tokens(262144, at::kBFloat16, true), 408);
  EXPECT_EQ(cross_entropy_chunk_tokens(128256, at::kBFloat16, false), kCrossEntropyChunkTokens);
  EXPECT_EQ(cross_entropy_chunk_tokens(32000, at::kFloat, false), kCrossEntropyChunkTokens);
  EXPECT_EQ(cross_entropy_chunk_tokens(int64_t{1} << 30, at::kFloat, false), 8);
  for (const int64_t vocab : {151936, 200000, 262144, 1000000}) {
    const int64_t chunk = cross_entropy_chunk_tokens(vocab, at::kBFloat16, true);
    EXPECT_EQ(chunk % 8, 0);
    EXPECT_LE(chunk * vocab * 10, kCrossEntropyChunkBytes);
    EXPECT_GT((chunk + 8) * vocab * 10, kCrossEntropyChunkBytes);
  }
}

// What a chunk allocates at its peak, in forward and in backward, counted exactly (TensorPeak):
// cross_entropy_bytes_per_logit per logit of the chunk, the number the chunk is sized by and the
// planner counts, plus the small tensors beside it (the gradient of h, labels, per-token sums:
// under 1%). Two chunks peak as one: a chunk's tensors are gone before the next one's. The
// output head is frozen, as in training.
TEST(CrossEntropy, AChunkHoldsTheBytesItIsSizedBy) {
  at::manual_seed(0);
  const int64_t tokens = 128, hidden = 32, vocab = 8192;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::optional<double> softcap : {std::optional<double>(), std::optional<double>(30.0)}) {
      for (const int64_t chunk : {tokens, tokens / 2}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + (softcap ? ", soft-capped" : "") + ", chunk " +
                     std::to_string(chunk));
        const auto h = at::randn({tokens, hidden}).to(dtype).requires_grad_(true);
        const auto w = at::randn({vocab, hidden}).to(dtype);
        const auto labels = at::randint(0, vocab, {tokens}, at::kLong);
        const int64_t expected = chunk * vocab * cross_entropy_bytes_per_logit(dtype, softcap.has_value());
        test::TensorPeakGuard peak;
        auto sum = chunked_cross_entropy_sum(h, w, labels, chunk, softcap);
        const int64_t forward = peak->peak();
        peak->reset_peak();
        const int64_t before_backward = peak->current();
        sum.backward();
        const int64_t backward = peak->peak() - before_backward;
        EXPECT_LE(forward, expected * 1.01) << "forward peak " << forward << " B";
        EXPECT_LE(backward, expected * 1.01) << "backward peak " << backward << " B";
        EXPECT_GE(std::max(forward, backward), expected) << "forward " << forward << " B, backward " << backward;
      }
    }
  }
}

TEST(CrossEntropy, RejectsLabelsOutsideTheVocabulary) {
  const auto h = at::randn({4, 8});
  const auto w = at::randn({10, 8});
  test::expect_error(
      [&] {
        chunked_cross_entropy_sum(h, w, at::tensor({1, 2, 10, 3}, at::kLong), 2);
      },
      "a label is outside [0, 10) and is not the ignore index -100");
  test::expect_error(
      [&] {
        chunked_cross_entropy_sum(h, w, at::tensor({1, 2, 3}, at::kLong), 2);
      },
      "labels must be int64 [4]");
}

at::Tensor reference_attention(const at::Tensor& q,
                               const at::Tensor& k,
                               const at::Tensor& v,
                               int64_t window,
                               double scale = 0,
                               double softcap = 0) {
  const int64_t groups = q.size(1) / k.size(1);
  auto kr = k.repeat_interleave(groups, 1), vr = v.repeat_interleave(groups, 1);
  auto scores =
      at::matmul(q, kr.transpose(-1, -2)) * (scale > 0 ? scale : 1 / std::sqrt(static_cast<double>(q.size(-1))));
  if (softcap > 0) scores = softcap * at::tanh(scores / softcap);
  const int64_t t = q.size(2);
  auto i = at::arange(t).unsqueeze(1), j = at::arange(t).unsqueeze(0);
  auto visible = (j <= i).logical_and(i - j < window);
  scores = scores.masked_fill(visible.logical_not(), -INFINITY);
  return at::matmul(at::softmax(scores, -1), vr);
}

TEST(Attention, CausalGqaAndSlidingWindowMatchAManualSoftmax) {
  at::manual_seed(1);
  const auto q = at::randn({2, 4, 11, 8}), k = at::randn({2, 2, 11, 8}), v = at::randn({2, 2, 11, 8});
  EXPECT_TRUE(at::allclose(causal_attention(q, k, v), reference_attention(q, k, v, 1 << 20), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(causal_attention(q, k, v, {3}), reference_attention(q, k, v, 3), 1e-5, 1e-6));
  // A window at least the sequence length is plain causal attention.
  EXPECT_TRUE(at::allclose(causal_attention(q, k, v, {11}), causal_attention(q, k, v), 1e-6, 1e-7));
  test::expect_error(
      [&] {
        causal_attention(q, at::randn({2, 3, 11, 8}), at::randn({2, 3, 11, 8}));
      },
      "4 query heads are not a multiple of 3 key/value heads");
}

TEST(Attention, ScaleAndSoftcapMatchAManualSoftmax) {
  at::manual_seed(3);
  // Scores of magnitude ~3 against a cap of 1.5.
  const auto q = at::randn({2, 4, 9, 6}) * 2, k = at::randn({2, 2, 9, 6}), v = at::randn({2, 2, 9, 6});
  for (std::optional<int64_t> window : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
    const auto got = causal_attention(q, k, v, {window, 0.3, 1.5});
    const auto want = reference_attention(q, k, v, window.value_or(1 << 20), 0.3, 1.5);
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6)) << window.value_or(0);
    EXPECT_FALSE(at::allclose(got, reference_attention(q, k, v, window.value_or(1 << 20), 0.3), 1e-3, 1e-3))
        << "the cap must matter";
  }
  EXPECT_TRUE(at::allclose(
      causal_attention(q, k, v, {std::nullopt, 0.3}), reference_attention(q, k, v, 1 << 20, 0.3), 1e-5, 1e-6));
  // Packed segments with the cap: no query sees another segment.
  const auto segments = at::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1}, at::kLong).unsqueeze(0).expand({2, 9});
  const auto got = causal_attention(q, k, v, {std::nullopt, 0.3, 1.5}, segments);
  const auto tail = reference_attention(q.narrow(2, 4, 5).contiguous(),
                                        k.narrow(2, 4, 5).contiguous(),
                                        v.narrow(2, 4, 5).contiguous(),
                                        1 << 20,
                                        0.3,
                                        1.5);
  EXPECT_TRUE(at::allclose(got.narrow(2, 4, 5), tail, 1e-5, 1e-6));
}

TEST(RmsNorm, GemmaScalesByOnePlusWeightInFloat32ThenCasts) {
  const auto x = at::randn({3, 16}).to(at::kBFloat16);
  const auto w = at::randn({16}).to(at::kBFloat16);
  const auto xf = x.to(at::kFloat);
  const auto expected = (xf * at::rsqrt(xf.pow(2).mean(-1, true) + 1e-6) * (1 + w.to(at::kFloat))).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(gemma_rms_norm(x, w, 1e-6), expected));
  EXPECT_FALSE(at::equal(rms_norm(x, w, 1e-6), expected));
}

// Gemma4RMSNorm: pow(ms + eps, -0.5), the weight itself (not 1 + w), float32 then cast; no weight
// for v_norm and the router's norm.
TEST(RmsNorm, Gemma4ScalesByTheWeightInFloat32ThenCasts) {
  const auto x = at::randn({3, 16}).to(at::kBFloat16);
  const auto w = at::randn({16}).to(at::kBFloat16);
  const auto xf = x.to(at::kFloat);
  const auto normed = xf * at::pow(xf.pow(2).mean(-1, true) + 1e-6, -0.5);
  EXPECT_TRUE(at::equal(gemma4_rms_norm(x, w, 1e-6), (normed * w.to(at::kFloat)).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(gemma4_rms_norm(x, at::Tensor(), 1e-6), normed.to(at::kBFloat16)));
  EXPECT_FALSE(at::equal(gemma_rms_norm(x, w, 1e-6), gemma4_rms_norm(x, w, 1e-6)));
}

TEST(RmsNorm, NormalisesInFloat32ThenMultipliesInTheInputDtype) {
  const auto x = at::randn({3, 16}).to(at::kBFloat16);
  const auto w = at::rand({16});
  const auto xf = x.to(at::kFloat);
  const auto expected = w.to(at::kBFloat16) * (xf * at::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(rms_norm(x, w, 1e-6), expected));
}

TEST(Rope, RotatesHalvesAndLlama3ScalingKeepsHighFrequencies) {
  const auto inv = rope_inv_freq(8, 10000.0, {});
  EXPECT_NEAR(inv[1].item<double>(), 1.0 / std::pow(10000.0, 2.0 / 8), 1e-7);
  RopeScaling s;
  s.type = "llama3";
  s.factor = 8;
  s.original_max_position_embeddings = 64;
  const auto scaled = rope_inv_freq(64, 500000.0, s);
  const auto plain = rope_inv_freq(64, 500000.0, {});
  EXPECT_EQ(scaled[0].item<float>(), plain[0].item<float>());                   // short wavelength: kept
  EXPECT_NEAR(scaled[31].item<double>(), plain[31].item<double>() / 8, 1e-12);  // long wavelength: / factor
  // Position 0 is the identity; a rotation keeps each (i, i + d/2) pair's norm.
  const auto x = at::randn({1, 1, 3, 8});
  const auto t = rope_tables(inv, at::arange(3, at::kLong), at::kFloat);
  const auto y = rope_apply(x, t);
  EXPECT_TRUE(at::allclose(y.select(2, 0), x.select(2, 0)));
  auto pair_norm = [](const at::Tensor& a) { return a.narrow(-1, 0, 4).pow(2) + a.narrow(-1, 4, 4).pow(2); };
  EXPECT_TRUE(at::allclose(pair_norm(y), pair_norm(x), 1e-5, 1e-6));
  test::expect_error([] { rope_inv_freq(8, 1e4, RopeScaling{"yarn"}); }, "rope_scaling type 'yarn' is not supported");
}

// Gemma 4's full layers: int(0.25 * 32 / 2) = 4 pairs rotate with the exponents of the whole dim
// (not of an 8-wide rotary dim), the other 12 have frequency 0 (cos 1, sin 0: the identity).
TEST(Rope, ProportionalRotatesTheFirstPairsWithExponentsOverTheWholeDim) {
  RopeScaling s;
  s.type = "proportional";
  s.partial_rotary_factor = 0.25;
  const auto inv = rope_inv_freq(32, 1e6, s);
  ASSERT_EQ(inv.size(0), 16);
  EXPECT_TRUE(at::equal(inv.narrow(0, 0, 4), rope_inv_freq(32, 1e6, {}).narrow(0, 0, 4)));
  EXPECT_TRUE(at::equal(inv.narrow(0, 4, 12), at::zeros({12})));
}

}  // namespace
}  // namespace qtrain::ops
