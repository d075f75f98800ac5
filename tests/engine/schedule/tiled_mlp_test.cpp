// Tiled MLP on the test llama (3 layers, 48 tokens, float32 and NF4 bases, LoRA on every linear):
// the losses equal the untiled run's bitwise (each token's MLP output is computed row for row as
// untiled) and the LoRA gradients to float32 rounding (the chunks' sums replace one sum over all
// tokens), with checkpointing on and off, with offloaded activations and streamed layers, and
// with any number of chunks; without checkpointing the forward keeps less for backward; the chunk count follows the
// configured shards or the default chunk size.
#include "engine/schedule/tiled_mlp.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/schedule/offloaded_weights.h"
#include "offload/simulated_copy_engine.h"
#include "tests/offload_training.h"

namespace qtrain::engine::schedule {
namespace {

using model::QuantSpec;

// Gradients of the tiled run against the untiled one: the chunks' partial sums change float32
// rounding only, a few units in the last place of the largest entry (measured: below 1e-6 of it).
void expect_close_grads(const test::StepsResult& got, const test::StepsResult& want, const std::string& what) {
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    const double scale = want.grads[i].abs().max().item<double>();
    ASSERT_GT(scale, 0) << what << ", gradient " << i << " is zero";
    const double diff = (got.grads[i] - want.grads[i]).abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * scale) << what << ", gradient " << i;
  }
}

TEST(TiledMlp, LossesAreBitwiseAndGradientsToRoundingTheUntiledOnes) {
  for (const auto kind : {QuantSpec::Kind::none, QuantSpec::Kind::nf4}) {
    for (const auto policy : {CheckpointPolicy::none, CheckpointPolicy::every_layer}) {
      auto plain = test::load_llama_with_lora(kind, at::kFloat, at::kCPU, /*dropout=*/0.0);
      const auto want = test::two_steps(plain, nullptr, policy);
      for (const int64_t shards : {2, 3, 48}) {
        const std::string what = std::string(kind == QuantSpec::Kind::none ? "float" : "nf4") +
                                 (policy == CheckpointPolicy::none ? ", no checkpointing" : ", checkpointing") + ", " +
                                 std::to_string(shards) + " chunks";
        auto lm = test::load_llama_with_lora(kind, at::kFloat, at::kCPU, 0.0);
        const auto got = test::two_steps(lm, nullptr, policy, nullptr, std::make_shared<TiledMlp>(shards));
        for (size_t s = 0; s < want.losses.size(); ++s) {
          EXPECT_TRUE(test::bitwise_equal(got.losses[s], want.losses[s])) << what << ", step " << s;
        }
        expect_close_grads(got, want, what);
        if (policy == CheckpointPolicy::none) {
          // Each layer keeps the MLP's input instead of gate's, up's and the activation's outputs
          // and the LoRA inputs of gate, up and down.
          EXPECT_LT(got.activation_bytes[0], want.activation_bytes[0]) << what;
        }
      }
    }
  }
}

TEST(TiledMlp, WorksWithCheckpointingOffloadedActivationsAndDropout) {
  // With dropout the masks are drawn chunk by chunk, so compare tiled runs with each other. The
  // backward redraws the forward's masks (the RNG restored), so a tiled run without checkpointing
  // equals one with, whose recompute redraws them once more; offloading the activations changes
  // no bit either.
  auto plain = test::load_llama_with_lora(QuantSpec::Kind::nf4);
  const auto uncheckpointed =
      test::two_steps(plain, nullptr, CheckpointPolicy::none, nullptr, std::make_shared<TiledMlp>(3));
  auto a = test::load_llama_with_lora(QuantSpec::Kind::nf4);
  const auto want = test::two_steps(a, nullptr, CheckpointPolicy::every_layer, nullptr, std::make_shared<TiledMlp>(3));
  test::expect_same_steps(want, uncheckpointed, "tiled with dropout, checkpointing on and off");
  auto b = test::load_llama_with_lora(QuantSpec::Kind::nf4);
  auto engine = std::make_shared<offload::SimulatedCopyEngine>();
  const auto got = test::two_steps(b,
                                   nullptr,
                                   CheckpointPolicy::every_layer,
                                   std::make_shared<OffloadedActivations>(engine, 1),
                                   std::make_shared<TiledMlp>(3));
  test::expect_same_steps(got, want, "tiled, activations offloaded");
  auto c = test::load_llama_with_lora(QuantSpec::Kind::nf4);
  auto streamed = offload_to_host(c, test::offload_plan(c, {0, 2}), std::make_shared<offload::SimulatedCopyEngine>());
  test::expect_same_steps(
      test::two_steps(c, streamed, CheckpointPolicy::every_layer, nullptr, std::make_shared<TiledMlp>(3)),
      want,
      "tiled, layers 0 and 2 streamed from host memory");
}

// With dropout the gradient must be the one of the forward that drew the masks: the backward's
// recompute replays the RNG. Checked against a central difference of the loss along the
// gradient of layer 1's down-projection LoRA B (the masks redrawn from the same seed each time):
// wrong masks would move the gradient by about the dropout rate, 10%.
TEST(TiledMlp, TheBackwardRedrawsTheForwardsDropoutMasks) {
  auto lm = test::load_llama_with_lora(QuantSpec::Kind::none, at::kFloat, at::kCPU, /*dropout=*/0.1);
  LayerScheduler scheduler(lm);
  scheduler.tile_mlp(std::make_shared<TiledMlp>(3));
  const auto plan = scheduler.prepare_training(CheckpointPolicy::none);
  const auto& batch = test::llama_fixture();
  auto b = lm.layers()[1].down.lora->b;
  const auto loss = [&] {
    at::manual_seed(7);
    const auto [sum, tokens] = scheduler.train_forward(plan, batch.ids, batch.labels);
    return sum / tokens;
  };
  b.mutable_grad() = at::Tensor();
  loss().backward();
  const auto g = b.grad().clone();
  const double norm = g.norm().item<double>();
  ASSERT_GT(norm, 0);
  const double eps = 1e-2;
  double plus = 0, minus = 0;
  {
    at::NoGradGuard no_grad;
    b.add_(g, eps / norm);
    plus = loss().item<double>();
    b.add_(g, -2 * eps / norm);
    minus = loss().item<double>();
    b.add_(g, eps / norm);
  }
  // The loss is smooth in b: the central difference matches the directional derivative, |g|,
  // to about eps^2 and float32 rounding of the loss (1e-7 / 2e-2): well within 1%.
  EXPECT_NEAR((plus - minus) / (2 * eps), norm, 0.01 * norm);
}

TEST(TiledMlp, TheChunkCountFollowsTheShardsOrTheDefaultChunkSize) {
  EXPECT_EQ(TiledMlp(4).shards_of(48), 4);
  EXPECT_EQ(TiledMlp(100).shards_of(48), 48) << "never more chunks than tokens";
  EXPECT_EQ(TiledMlp(0).shards_of(kDefaultTiledMlpTokens), 1);
  EXPECT_EQ(TiledMlp(0).shards_of(kDefaultTiledMlpTokens + 1), 2);
  EXPECT_EQ(TiledMlp(0).shards_of(80000), 20);
  EXPECT_THROW(TiledMlp(-1), c10::Error);
}

}  // namespace
}  // namespace qtrain::engine::schedule
