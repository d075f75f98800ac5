// A sharded base on GPUs (label gpu; each test skips itself without enough of them): on one GPU a
// run of one keeps its shards on the device, or in pinned host memory for offloaded layers, and
// trains bit for bit as the resident model; on two GPUs two NCCL ranks gather into device slots
// and train bit for bit as the resident model on one. The CPU tests over Gloo
// (sharded_base_test.cpp) check the same on every machine.
#include <optional>

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include "engine/dist/sharded_base.h"
#include "engine/schedule/streamed_weights.h"
#include "tests/offload_training.h"
#include "tests/thread_ranks.h"

namespace qtrain::engine::dist {
namespace {

using model::QuantSpec;
using schedule::CheckpointPolicy;

int64_t gpus() {
  return at::hasCUDA() ? at::detail::getCUDAHooks().deviceCount() : 0;
}

TEST(ShardedBaseCuda, ARunOfOneOnOneGpuTrainsAsTheResidentModel) {
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  auto resident = test::load_llama_with_lora(QuantSpec::Kind::nf4, at::kBFloat16, gpu, 0.0);
  const auto want = test::two_steps(resident, nullptr, CheckpointPolicy::none);
  DistEnv one;
  Comm comm(one, std::chrono::seconds(60));
  // Layer 1 loads into host memory, as an offloaded layer does: its shard stays there, pinned.
  const auto plan = test::offload_plan(resident, {1}, 1, /*shard_base=*/true);
  auto base = std::make_shared<ShardedBase>(comm, plan);
  auto lm = test::load_llama_with_lora(
      QuantSpec::Kind::nf4, at::kBFloat16, gpu, 0.0, [&](model::LoadOptions& o) { base->prepare_load(o); });
  base->bind_model(lm);
  EXPECT_GT(base->host_shard_bytes(), 0);
  EXPECT_LT(base->host_shard_bytes(), base->shard_bytes());
  auto sharded = std::make_shared<schedule::StreamedWeights>(lm, plan, base);
  test::expect_same_steps(test::two_steps(lm, sharded, CheckpointPolicy::none), want, "one rank on cuda:0");
  EXPECT_EQ(sharded->stats().unprepared_acquisitions, 0);
}

TEST(ShardedBaseCuda, TwoNcclRanksOnTwoGpusTrainAsTheResidentModel) {
  if (gpus() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  std::vector<test::StepsResult> want(2), got(2);
  std::optional<schedule::ResidencyPlan> plan;
  for (int r = 0; r < 2; ++r) {
    auto resident = test::load_llama_with_lora(
        QuantSpec::Kind::nf4, at::kBFloat16, at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(r)), 0.0);
    want[r] = test::two_steps(resident, nullptr, CheckpointPolicy::none);
    plan = test::offload_plan(resident, {}, 1, /*shard_base=*/true);
  }
  test::run_ranks(
      2,
      std::chrono::seconds(120),
      [&](Comm& comm) {
        auto base = std::make_shared<ShardedBase>(comm, *plan);
        const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(comm.rank()));
        auto lm = test::load_llama_with_lora(
            QuantSpec::Kind::nf4, at::kBFloat16, gpu, 0.0, [&](model::LoadOptions& o) { base->prepare_load(o); });
        base->bind_model(lm);
        auto sharded = std::make_shared<schedule::StreamedWeights>(lm, *plan, base);
        got[comm.rank()] = test::two_steps(lm, sharded, CheckpointPolicy::none);
      },
      DdpBackend::nccl);
  for (int r = 0; r < 2; ++r) test::expect_same_steps(got[r], want[r], "rank " + std::to_string(r));
}

}  // namespace
}  // namespace qtrain::engine::dist
