// Activation offloading on the simulated copy engine: a stashed input comes back from host
// memory with its bytes (the device tensor overwritten meanwhile), the inputs before it are
// fetched prefetch_depth + 1 ahead, the last prefetch_depth + 1 stay on the device, the device holds
// at most prefetch_depth + 2 inputs (several leaving at once when the copies lag), and one whose
// copy out has not finished comes back without a round trip; training with offloaded activations
// gives losses and LoRA gradients bitwise equal to training without (float, NF4 and INT8 bases,
// every input through host memory, or with offloaded weights sharing the copy engine and copies
// delayed so they lag).
#include "engine/schedule/offloaded_activations.h"

#include <chrono>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/schedule/offloaded_weights.h"
#include "offload/simulated_copy_engine.h"
#include "tests/expect_error.h"
#include "tests/offload_training.h"

namespace qtrain::engine::schedule {
namespace {

using model::QuantSpec;
using namespace std::chrono_literals;

void wait_for_copies(const offload::SimulatedCopyEngine& engine, int64_t n) {
  while (engine.copies_done() < n) std::this_thread::sleep_for(100us);
}

TEST(OffloadedActivations, AnInputComesBackFromHostMemoryWithItsBytes) {
  auto engine = std::make_shared<offload::SimulatedCopyEngine>();
  OffloadedActivations activations(engine, /*prefetch_depth=*/1);
  activations.begin_step();
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 5; ++i) {
    inputs.push_back(at::randn({2, 5, 8}).to(at::kBFloat16));
    EXPECT_EQ(activations.stash(inputs.back(), /*checkpointed_after=*/10), i);
  }
  EXPECT_EQ(activations.copies_out(), 5);
  EXPECT_EQ(activations.host_bytes(), 5 * 2 * 5 * 8 * 2);
  wait_for_copies(*engine, 5);

  // Restoring input 4 lets go of inputs 1 and 0 (their copies out have finished, and they are
  // not among the next depth + 1 restores), which then come back from host memory into new
  // device buffers with their bytes. Inputs 4, 3 and 2 come back with their bytes, from the
  // device or from host memory (whether a stash found their copies finished depends on timing).
  for (int64_t k = 4; k >= 2; --k) EXPECT_TRUE(at::equal(activations.restore(k), inputs[k])) << k;
  for (int64_t k = 1; k >= 0; --k) {
    const auto back = activations.restore(k);
    EXPECT_NE(back.data_ptr(), inputs[k].data_ptr()) << k;
    EXPECT_EQ(back.scalar_type(), at::kBFloat16);
    EXPECT_EQ(back.sizes(), inputs[k].sizes());
    EXPECT_TRUE(at::equal(back, inputs[k])) << k;
  }
  EXPECT_GE(activations.copies_in(), 2);
  EXPECT_LE(activations.copies_in(), 4);
  test::expect_error([&] { activations.restore(0); }, "input 0 was not stashed in this step or was restored already");
}

TEST(OffloadedActivations, AnInputWrittenInPlaceAfterItsStashIsRefused) {
  auto engine = std::make_shared<offload::SimulatedCopyEngine>();
  OffloadedActivations activations(engine, /*prefetch_depth=*/1);
  activations.begin_step();
  auto h = at::randn({2, 8});
  const int64_t key = activations.stash(h, /*checkpointed_after=*/1);  // one of the last: it stays
  h.add_(1);
  test::expect_error([&] { activations.restore(key); },
                     "input 0 of this step (the input of its checkpointed layer number 0, counting checkpointed "
                     "layers from 0) was written in place after the forward stashed it");
}

TEST(OffloadedActivations, TheLastInputsStayAndTheDeviceHoldsAtMostDepthPlusTwo) {
  // Copies slow enough that several would be in flight at once without the limit.
  auto engine = std::make_shared<offload::SimulatedCopyEngine>(offload::SimulatedCopyOptions{100ms, false});
  const int64_t depth = 2, n = 8;
  OffloadedActivations activations(engine, depth);
  activations.begin_step();
  std::vector<at::Tensor> inputs;
  int64_t most_leaving = 0;
  for (int64_t i = 0; i < n; ++i) {
    inputs.push_back(at::randn({2, 8}));
    activations.stash(inputs.back(), /*checkpointed_after=*/n - 1 - i);
    const int64_t leaving = activations.copies_out() - engine->copies_done();
    const int64_t stay = std::max<int64_t>(0, i - (n - 1 - depth - 1));
    EXPECT_LE(leaving + stay, depth + 2) << "input " << i;
    most_leaving = std::max(most_leaving, leaving);
  }
  EXPECT_EQ(most_leaving, depth + 2) << "in the middle of the forward the copies may lag by depth + 2 inputs";
  EXPECT_EQ(activations.copies_out(), n - depth - 1) << "the last depth + 1 inputs stay";
  for (int64_t i = n - 1; i >= n - depth - 1; --i) {
    EXPECT_EQ(activations.restore(i).data_ptr(), inputs[i].data_ptr()) << "input " << i << " never left";
  }
  for (int64_t i = n - depth - 2; i >= 0; --i) EXPECT_TRUE(at::equal(activations.restore(i), inputs[i])) << i;
}

TEST(OffloadedActivations, AnInputStillLeavingComesBackWithoutARoundTrip) {
  // Compute fences stay pending: no copy out can start, as if the GPU were still computing.
  auto engine = std::make_shared<offload::SimulatedCopyEngine>(offload::SimulatedCopyOptions{0us, true});
  OffloadedActivations activations(engine, /*prefetch_depth=*/2);
  activations.begin_step();
  const auto h = at::randn({1, 4, 8});
  const int64_t key = activations.stash(h, /*checkpointed_after=*/10);
  const auto back = activations.restore(key);
  EXPECT_EQ(back.data_ptr(), h.data_ptr()) << "the device tensor itself, its copy out not done";
  EXPECT_EQ(activations.copies_in(), 0);
  engine->finish_compute();
  activations.begin_step();  // waits for the copy out that is still queued
  EXPECT_EQ(engine->copies_done(), 1);
}

// Resident weights whose every acquisition takes longer than a copy (the simulated engine's 1 ms
// delay): each input's copy out is done before backward asks for it, so all of them make the
// round trip through host memory.
class UnhurriedWeights final : public WeightResidency {
 public:
  void acquire(int64_t) override { std::this_thread::sleep_for(5ms); }
  void release(int64_t) override {}
};

struct Variant {
  QuantSpec::Kind kind;
  bool offload_weights;
  CheckpointPolicy policy;
  int64_t depth;
  std::string name;
  friend void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }
};

class ActivationOffloadEquivalence : public testing::TestWithParam<Variant> {};

TEST_P(ActivationOffloadEquivalence, LossesAndEveryLoraGradientAreBitwiseIdentical) {
  const auto& v = GetParam();
  auto plain = test::load_llama_with_lora(v.kind);
  const auto want = test::two_steps(plain, nullptr, v.policy);
  auto lm = test::load_llama_with_lora(v.kind);
  auto engine = std::make_shared<offload::SimulatedCopyEngine>(offload::SimulatedCopyOptions{1ms, false});
  std::shared_ptr<WeightResidency> weights = std::make_shared<UnhurriedWeights>();
  if (v.offload_weights) weights = offload_to_host(lm, test::offload_plan(lm, {1}, v.depth), engine);
  auto activations = std::make_shared<OffloadedActivations>(engine, v.depth);
  const auto got = test::two_steps(lm, weights, v.policy, activations);
  ASSERT_GT(got.checkpointed, 0);
  // The last depth + 1 inputs stay on the device; every other one leaves, once per step.
  const int64_t leaving = got.checkpointed - std::min(got.checkpointed, v.depth + 1);
  // With checkpointing off only the offloaded layer is checkpointed, and its input stays.
  if (v.policy == CheckpointPolicy::every_layer) ASSERT_GT(leaving, 0) << "too few layers to offload any input";
  EXPECT_EQ(activations->copies_out(), leaving);
  if (!v.offload_weights) {
    EXPECT_EQ(activations->copies_in(), leaving) << "every one came back from host memory";
  }
  for (const auto& g : want.grads) ASSERT_GT(g.abs().sum().item<double>(), 0);
  test::expect_same_steps(got, want, v.name);
}

INSTANTIATE_TEST_SUITE_P(
    Bases,
    ActivationOffloadEquivalence,
    testing::Values(Variant{QuantSpec::Kind::nf4, false, CheckpointPolicy::every_layer, 1, "nf4"},
                    Variant{QuantSpec::Kind::int8, false, CheckpointPolicy::every_layer, 1, "int8"},
                    Variant{QuantSpec::Kind::none, false, CheckpointPolicy::every_layer, 1, "float"},
                    Variant{QuantSpec::Kind::nf4, true, CheckpointPolicy::every_layer, 1, "nf4_offloaded_weights"},
                    Variant{QuantSpec::Kind::int8, true, CheckpointPolicy::none, 1, "int8_offloaded_weights_only"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace qtrain::engine::schedule
