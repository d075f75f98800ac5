// The layer scheduler: train mode before checkpoints by construction, eval plans refused for
// training, recompute counts, and checkpointing that changes nothing: losses and every LoRA
// gradient bitwise identical with it on and off (float32 and bfloat16; float, NF4 and INT8
// bases; LoRA dropout on, so the RNG must be replayed), and INT8 state untouched by recompute.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::schedule {
namespace {

using model::QuantSpec;

model::CausalLM load(QuantSpec::Kind kind, at::ScalarType dtype, double dropout) {
  QuantSpec q;
  q.kind = kind;
  q.double_quant = true;
  auto lm = model::CausalLM::load(io::HfFolder::open(test::model_fixture("llama") / "base"), {q, dtype, at::kCPU, {}});
  lora::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.dropout = dropout;
  c.target_all_linear = true;
  model::attach_new_lora(lm, c, 11);
  // B starts at zero; make it non-zero so that every gradient is non-trivial.
  at::manual_seed(5);
  at::NoGradGuard no_grad;
  for (auto& [name, a] : model::lora_adapters(lm)) a.b.normal_(0, 0.05);
  return lm;
}

struct StepResult {
  at::Tensor loss;
  std::vector<at::Tensor> grads;
  StepStats stats;
};

StepResult step(model::CausalLM& lm, CheckpointPolicy policy, int64_t k = 1) {
  for (auto& p : lm.trainable_parameters()) p.mutable_grad() = at::Tensor();
  LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(policy, k);
  const auto ref = io::SafetensorsFile::open(test::model_fixture("llama") / "reference.safetensors");
  at::manual_seed(123);  // the dropout masks of this step
  const auto [sum, tokens] = scheduler.train_forward(plan, ref.tensor("ids"), ref.tensor("labels"));
  const auto loss = sum / tokens;
  loss.backward();
  StepResult r{loss.detach(), {}, scheduler.stats()};
  for (const auto& p : lm.trainable_parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

struct Variant {
  QuantSpec::Kind kind;
  at::ScalarType dtype;
  std::string name;
  friend void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }
};

class CheckpointEquivalence : public testing::TestWithParam<Variant> {};

TEST_P(CheckpointEquivalence, LossAndEveryLoraGradientAreBitwiseIdentical) {
  const auto& v = GetParam();
  auto lm = load(v.kind, v.dtype, /*dropout=*/0.1);
  const auto off = step(lm, CheckpointPolicy::none);
  EXPECT_EQ(off.stats.layers_checkpointed, 0);
  EXPECT_EQ(off.stats.layers_recomputed, 0);
  for (auto [policy, k, expected] :
       {std::tuple{CheckpointPolicy::every_layer, 1, 3}, {CheckpointPolicy::every_kth, 2, 2}}) {
    const auto on = step(lm, policy, k);
    EXPECT_EQ(on.stats.layers_checkpointed, expected);
    EXPECT_EQ(on.stats.layers_recomputed, expected);
    EXPECT_TRUE(test::bitwise_equal(on.loss, off.loss))
        << v.name << ": " << on.loss.item<double>() << " vs " << off.loss.item<double>();
    ASSERT_EQ(on.grads.size(), off.grads.size());
    for (size_t i = 0; i < on.grads.size(); ++i) {
      ASSERT_TRUE(off.grads[i].abs().sum().item<double>() > 0) << "gradient " << i << " is zero";
      EXPECT_TRUE(test::bitwise_equal(on.grads[i], off.grads[i]))
          << v.name << " gradient " << i << ": " << test::count_bitwise_diff(on.grads[i], off.grads[i])
          << " elements differ";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bases,
                         CheckpointEquivalence,
                         testing::Values(Variant{QuantSpec::Kind::none, at::kFloat, "fp32"},
                                         Variant{QuantSpec::Kind::none, at::kBFloat16, "bf16"},
                                         Variant{QuantSpec::Kind::nf4, at::kFloat, "nf4_fp32"},
                                         Variant{QuantSpec::Kind::nf4, at::kBFloat16, "nf4_bf16"},
                                         Variant{QuantSpec::Kind::int8, at::kFloat, "int8_fp32"},
                                         Variant{QuantSpec::Kind::int8, at::kBFloat16, "int8_bf16"}),
                         [](const testing::TestParamInfo<Variant>& info) { return info.param.name; });

TEST(LayerScheduler, DropoutIsActiveInTrainingSoTheRngReplayMatters) {
  auto lm = load(QuantSpec::Kind::none, at::kFloat, 0.5);
  const auto a = step(lm, CheckpointPolicy::none);
  at::manual_seed(999);
  LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(CheckpointPolicy::none);
  const auto ref = io::SafetensorsFile::open(test::model_fixture("llama") / "reference.safetensors");
  const auto other = scheduler.train_forward(plan, ref.tensor("ids"), ref.tensor("labels"));
  EXPECT_NE((other.loss_sum / other.tokens).item<double>(), a.loss.item<double>());
}

TEST(LayerScheduler, APackedRowGivesTheLossesOfItsSamplesSeparately) {
  // Two samples in one row: positions restart and attention stays inside each sample, so the
  // summed loss and the token count equal those of the samples run one by one. (The first label
  // of a packed sample is -100: its token is not predicted from the previous sample.)
  auto lm = load(QuantSpec::Kind::nf4, at::kFloat, 0.0);
  LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  at::manual_seed(8);
  const auto a = at::randint(0, 160, {1, 10}, at::kLong), b = at::randint(0, 160, {1, 14}, at::kLong);
  const auto ra = scheduler.eval_loss(plan, a, a), rb = scheduler.eval_loss(plan, b, b);
  auto labels = at::cat({a, b}, 1);
  labels[0][10] = -100;
  StepInputs packed{at::cat({a, b}, 1),
                    labels,
                    at::cat({at::arange(10, at::kLong), at::arange(14, at::kLong)}).unsqueeze(0),
                    at::cat({at::zeros({10}, at::kLong), at::ones({14}, at::kLong)}).unsqueeze(0)};
  const auto rp = scheduler.eval_loss(plan, packed);
  EXPECT_EQ(rp.tokens, ra.tokens + rb.tokens);
  EXPECT_NEAR(rp.loss_sum.item<double>(), (ra.loss_sum + rb.loss_sum).item<double>(), 1e-4);
  // Padding after the samples changes nothing either.
  StepInputs padded{at::cat({packed.input_ids, at::zeros({1, 3}, at::kLong)}, 1),
                    at::cat({labels, at::full({1, 3}, -100, at::kLong)}, 1),
                    at::cat({packed.position_ids, at::zeros({1, 3}, at::kLong)}, 1),
                    at::cat({packed.segment_ids, at::full({1, 3}, -1, at::kLong)}, 1)};
  const auto rpad = scheduler.eval_loss(plan, padded);
  EXPECT_EQ(rpad.tokens, rp.tokens);
  EXPECT_NEAR(rpad.loss_sum.item<double>(), rp.loss_sum.item<double>(), 1e-4);
}

TEST(LayerScheduler, PackedTrainingIsEqualWithAndWithoutCheckpointing) {
  auto lm = load(QuantSpec::Kind::nf4, at::kFloat, 0.1);
  at::manual_seed(9);
  const auto ids = at::randint(0, 160, {2, 16}, at::kLong);
  StepInputs in{
      ids, ids, at::arange(16, at::kLong).remainder(8).repeat({2, 1}), (at::arange(16, at::kLong) / 8).repeat({2, 1})};
  std::vector<at::Tensor> grads[2];
  for (int ck = 0; ck < 2; ++ck) {
    for (auto& p : lm.trainable_parameters()) p.mutable_grad() = at::Tensor();
    LayerScheduler scheduler(lm);
    const auto plan = scheduler.prepare_training(ck ? CheckpointPolicy::every_layer : CheckpointPolicy::none);
    at::manual_seed(1);
    const auto r = scheduler.train_forward(plan, in);
    r.loss_sum.backward();
    for (const auto& p : lm.trainable_parameters()) grads[ck].push_back(p.grad().clone());
  }
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(test::bitwise_equal(grads[0][i], grads[1][i])) << i;
}

TEST(LayerScheduler, TrainingWithAnEvalPlanIsAnError) {
  auto lm = load(QuantSpec::Kind::none, at::kFloat, 0.0);
  LayerScheduler scheduler(lm);
  const auto ids = at::zeros({1, 4}, at::kLong);
  const auto eval = scheduler.prepare_eval();
  test::expect_error([&] { scheduler.train_forward(eval, ids, ids); },
                     "a training step was given an eval plan; make it with prepare_training()");
  const auto train = scheduler.prepare_training(CheckpointPolicy::every_layer);
  EXPECT_TRUE(train.training());
  EXPECT_EQ(train.num_checkpointed(), 3);
  test::expect_error([&] { scheduler.eval_loss(train, ids, ids); }, "eval_loss needs an eval plan");
  scheduler.prepare_eval();
  test::expect_error([&] { scheduler.train_forward(train, ids, ids); }, "switched to eval after this plan was made");
  test::expect_error([&] { scheduler.prepare_training(CheckpointPolicy::every_kth, 0); }, "needs k >= 1, got 0");
  test::expect_error([] { checkpoint_policy_from_name("sometimes"); }, "use none, every_layer or every_kth");
}

TEST(LayerScheduler, RecomputeReacquiresEachCheckpointedLayer) {
  auto lm = load(QuantSpec::Kind::nf4, at::kFloat, 0.0);
  auto residency = std::make_shared<ResidentWeights>();
  LayerScheduler scheduler(lm, residency);
  const auto plan = scheduler.prepare_training(CheckpointPolicy::every_layer);
  const auto ref = io::SafetensorsFile::open(test::model_fixture("llama") / "reference.safetensors");
  const auto r = scheduler.train_forward(plan, ref.tensor("ids"), ref.tensor("labels"));
  EXPECT_EQ(residency->acquires(), 3);
  r.loss_sum.backward();
  EXPECT_EQ(residency->acquires(), 6);
  EXPECT_EQ(residency->releases(), 6);
  EXPECT_EQ(scheduler.stats().layers_recomputed, 3);
}

TEST(LayerScheduler, CheckpointingKeepsLessActivationMemory) {
  auto lm = load(QuantSpec::Kind::nf4, at::kFloat, 0.0);
  const auto ids = at::randint(0, 160, {4, 128}, at::kLong);
  int64_t bytes[2];
  for (int i = 0; i < 2; ++i) {
    LayerScheduler scheduler(lm);
    const auto plan = scheduler.prepare_training(i == 0 ? CheckpointPolicy::none : CheckpointPolicy::every_layer);
    const auto r = scheduler.train_forward(plan, ids, ids);
    bytes[i] = scheduler.stats().activation_bytes;
  }
  EXPECT_GT(bytes[0], 3 * bytes[1]) << "no checkpointing: " << bytes[0] << " B, every layer: " << bytes[1] << " B";
}

TEST(LayerScheduler, Int8StateIsNotChangedByRecomputeOrRepeatedForward) {
  auto lm = load(QuantSpec::Kind::int8, at::kFloat, 0.0);
  std::vector<at::Tensor> cb, scb;
  for (const auto& layer : lm.layers()) {
    for (const auto* l : layer.linears()) {
      const auto& w = std::get<ops::Int8Weight>(l->weight);
      cb.push_back(w.cb().clone());
      scb.push_back(w.scb().clone());
    }
  }
  const auto once = step(lm, CheckpointPolicy::every_layer);
  // Forward twice (the first graph is dropped unused), then backward through the second.
  for (auto& p : lm.trainable_parameters()) p.mutable_grad() = at::Tensor();
  LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(CheckpointPolicy::every_layer);
  const auto ref = io::SafetensorsFile::open(test::model_fixture("llama") / "reference.safetensors");
  at::manual_seed(123);
  scheduler.train_forward(plan, ref.tensor("ids"), ref.tensor("labels"));
  at::manual_seed(123);
  const auto r = scheduler.train_forward(plan, ref.tensor("ids"), ref.tensor("labels"));
  (r.loss_sum / r.tokens).backward();
  const auto params = lm.trainable_parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(test::bitwise_equal(params[i].grad(), once.grads[i])) << i;
  size_t j = 0;
  for (const auto& layer : lm.layers()) {
    for (const auto* l : layer.linears()) {
      const auto& w = std::get<ops::Int8Weight>(l->weight);
      EXPECT_TRUE(test::bitwise_equal(w.cb(), cb[j])) << l->name;
      EXPECT_TRUE(test::bitwise_equal(w.scb(), scb[j])) << l->name;
      ++j;
    }
  }
}

}  // namespace
}  // namespace qtrain::engine::schedule
