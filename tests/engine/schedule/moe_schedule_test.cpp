// Scheduling of MoE layers: checkpointing on or off, layers or activations offloaded (simulated copy
// engine, experts and all) or resident, give bitwise-identical losses and LoRA gradients,
// attention and expert LoRA alike, on the Mixtral and Gemma 4 fixtures with NF4 experts and with
// either expert kernel (per expert, grouped), and with the load-balancing loss on the Mixtral
// fixture.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/schedule/offloaded_weights.h"
#include "offload/simulated_copy_engine.h"
#include "tests/reference.h"

namespace qtrain::engine::schedule {
namespace {

using namespace std::chrono_literals;

model::CausalLM load_with_lora(const std::string& name,
                               nlohmann::json model_config = nlohmann::json::object(),
                               model::ExpertKernel kernel = model::ExpertKernel::automatic) {
  model::LoadOptions o;
  o.model_config = std::move(model_config);
  o.expert_kernel = kernel;
  o.quant.kind = model::QuantSpec::Kind::nf4;
  o.quant.double_quant = true;
  auto lm = model::CausalLM::load(io::HfFolder::open(test::moe_fixture(name) / "base"), o);
  lora::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.target_modules = {"q_proj", "o_proj"};
  const auto& experts = lm.config().moe->experts_path;
  c.target_parameters = {experts + ".gate_up_proj", experts + ".down_proj"};
  model::attach_new_lora(lm, c, 11);
  at::manual_seed(5);
  at::NoGradGuard no_grad;
  for (auto& [name, a] : model::lora_adapters(lm)) a.b.normal_(0, 0.05);
  return lm;
}

std::shared_ptr<OffloadedActivations> activation_store(std::shared_ptr<offload::CopyEngine> engine) {
  return std::make_shared<OffloadedActivations>(std::move(engine), 1);
}

struct Steps {
  std::vector<at::Tensor> losses, grads;
};

Steps two_steps(const std::string& name,
                model::CausalLM& lm,
                std::shared_ptr<WeightResidency> residency,
                CheckpointPolicy policy,
                int64_t every_k = 1,
                std::shared_ptr<OffloadedActivations> activations = nullptr,
                std::shared_ptr<TiledMlp> tiled = nullptr) {
  LayerScheduler scheduler(lm, std::move(residency));
  scheduler.offload_activations(std::move(activations));
  scheduler.tile_mlp(std::move(tiled));
  const auto plan = scheduler.prepare_training(policy, every_k);
  const auto ref = io::SafetensorsFile::open(test::moe_fixture(name) / "reference.safetensors");
  Steps r;
  for (auto& p : lm.trainable_parameters()) p.mutable_grad() = at::Tensor();
  for (int step = 0; step < 2; ++step) {
    // Row 1 ends in padding: the load-balancing loss, where it is on, leaves it out.
    const auto mask = at::ones_like(ref.tensor("ids")).index_put_({1, at::indexing::Slice(-3)}, 0);
    const auto res = scheduler.train_forward(plan, {ref.tensor("ids"), ref.tensor("labels"), {}, {}, mask});
    auto loss = res.loss_sum / res.tokens;
    if (scheduler.aux_loss().defined()) {
      loss = loss + lm.config().moe->router_aux_loss_coef * scheduler.aux_loss();
      r.losses.push_back(scheduler.aux_loss().detach());
    }
    loss.backward();
    r.losses.push_back(res.loss_sum.detach());
  }
  for (const auto& p : lm.trainable_parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

void expect_identical(const Steps& a, const Steps& b, const std::string& what) {
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_TRUE(test::bitwise_equal(a.losses[i], b.losses[i])) << what;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(test::bitwise_equal(a.grads[i], b.grads[i]))
        << what << " gradient " << i << ": " << test::count_bitwise_diff(a.grads[i], b.grads[i]) << " differ";
  }
}

// Runs the checks of the test below with `kernel` and returns the resident, unchecked run.
Steps check_schedules(const std::string& name, model::ExpertKernel kernel) {
  auto lm = load_with_lora(name, nlohmann::json::object(), kernel);
  // q and o on every layer, gate_up and down experts on every layer (all are sparse in both
  // fixtures: Mixtral's 3, Gemma 4's 5), A and B each.
  const size_t layers = lm.layers().size();
  EXPECT_EQ(layers, name == "mixtral" ? 3u : 5u);
  EXPECT_EQ(lm.trainable_parameters().size(), (layers * 2 + layers * 2) * 2);
  const auto plain = two_steps(name, lm, nullptr, CheckpointPolicy::none);
  for (const auto& g : plain.grads) EXPECT_GT(g.abs().max().item<double>(), 0.0);
  expect_identical(plain, two_steps(name, lm, nullptr, CheckpointPolicy::every_layer), "checkpointing");
  auto offloaded = offload_to_host(lm,
                                   ResidencyPlan(static_cast<int64_t>(lm.layers().size()), {{0, 2}}),
                                   std::make_shared<offload::SimulatedCopyEngine>());
  expect_identical(plain, two_steps(name, lm, offloaded, CheckpointPolicy::every_layer), "offload");
  const auto engine = std::make_shared<offload::SimulatedCopyEngine>(offload::SimulatedCopyOptions{1ms, false});
  expect_identical(plain,
                   two_steps(name, lm, nullptr, CheckpointPolicy::every_layer, 1, activation_store(engine)),
                   "activation offloading");
  // Tiled MLPs (Gemma 4's dense MLP beside the experts; Mixtral has none, the experts are not
  // tiled): the losses bitwise, the gradients to float32 rounding (sums over chunks), with the
  // inputs offloaded too.
  const auto tiled = two_steps(
      name, lm, nullptr, CheckpointPolicy::every_layer, 1, activation_store(engine), std::make_shared<TiledMlp>(3));
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_TRUE(test::bitwise_equal(tiled.losses[i], plain.losses[i])) << "tiled MLP, loss " << i;
  }
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    EXPECT_LE((tiled.grads[i] - plain.grads[i]).abs().max().item<double>(),
              1e-5 * plain.grads[i].abs().max().item<double>())
        << "tiled MLP, gradient " << i;
  }
  return plain;
}

class MoeSchedule : public testing::TestWithParam<std::string> {};

// With either expert kernel (the grouped one's backward node keeps the experts' stored tensors,
// which offload rebinds to its slots between forward and backward).
TEST_P(MoeSchedule, CheckpointingAndOffloadChangeNoLossAndNoGradientBit) {
  const auto& name = GetParam();
  std::vector<Steps> runs;
  for (const auto kernel : {model::ExpertKernel::per_expert, model::ExpertKernel::grouped}) {
    SCOPED_TRACE(kernel == model::ExpertKernel::grouped ? "grouped kernel" : "per-expert kernel");
    runs.push_back(check_schedules(name, kernel));
  }
  // The two kernels agree to float32 summation order (tests/engine/model/grouped_experts_test.cpp).
  for (size_t i = 0; i < runs[0].losses.size(); ++i) {
    EXPECT_LT((runs[1].losses[i] - runs[0].losses[i]).abs().item<double>(),
              1e-5 * runs[0].losses[i].abs().item<double>());
  }
  for (size_t i = 0; i < runs[0].grads.size(); ++i) {
    EXPECT_LT((runs[1].grads[i] - runs[0].grads[i]).abs().max().item<double>(),
              1e-5 * runs[0].grads[i].abs().max().item<double>())
        << "gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families,
                         MoeSchedule,
                         testing::Values("mixtral", "gemma4_moe"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// The load-balancing loss under checkpointing and offload: each checkpointed sparse layer records
// its router load once (in forward) and back-propagates it through the recompute. A coefficient
// of 1 makes its gradient visible next to the cross-entropy's.
TEST(MoeSchedule, LoadBalancingLossChangesNoBitUnderCheckpointingAndOffload) {
  auto lm = load_with_lora("mixtral", {{"output_router_logits", true}, {"router_aux_loss_coef", 1.0}});
  const auto plain = two_steps("mixtral", lm, nullptr, CheckpointPolicy::none);
  ASSERT_EQ(plain.losses.size(), size_t{4});  // aux and CE per step
  auto without = load_with_lora("mixtral");
  const auto ce_only = two_steps("mixtral", without, nullptr, CheckpointPolicy::none);
  EXPECT_TRUE(test::bitwise_equal(plain.losses[1], ce_only.losses[0]));
  EXPECT_GT((plain.grads[0] - ce_only.grads[0]).abs().max().item<double>(), 0.0) << "the aux loss has no gradient";
  expect_identical(plain, two_steps("mixtral", lm, nullptr, CheckpointPolicy::every_layer), "checkpointing");
  expect_identical(
      plain, two_steps("mixtral", lm, nullptr, CheckpointPolicy::every_kth, 2), "checkpointing every other layer");
  auto offloaded = offload_to_host(lm,
                                   ResidencyPlan(static_cast<int64_t>(lm.layers().size()), {{0, 2}}),
                                   std::make_shared<offload::SimulatedCopyEngine>());
  expect_identical(plain, two_steps("mixtral", lm, offloaded, CheckpointPolicy::every_layer), "offload");
  const auto engine = std::make_shared<offload::SimulatedCopyEngine>(offload::SimulatedCopyOptions{1ms, false});
  expect_identical(plain,
                   two_steps("mixtral", lm, nullptr, CheckpointPolicy::every_kth, 2, activation_store(engine)),
                   "activation offloading, every other layer checkpointed");
}

}  // namespace
}  // namespace qtrain::engine::schedule
