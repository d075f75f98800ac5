// Tests for engine/train/device_plan: the residency plan is the config's and the planner's
// choice, made once (on the CPU too); the host-memory check: a plan that pins more than three
// quarters of the available host RAM (offloaded layers plus offloaded activations) is refused with
// both parts and the fix; one within it, one that pins nothing, and an unreadable MemAvailable
// pass; this machine's MemAvailable is read.
#include "engine/train/device_plan.h"

#include <gtest/gtest.h>

#include "tests/llama_fixture.h"

namespace qtrain::engine::train {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

offload::MemoryPlan pinning(int64_t layers, int64_t activations) {
  offload::MemoryPlan p;
  p.host_bytes = layers;
  p.activation_host_bytes = activations;
  return p;
}

TEST(DevicePlan, TheResidencyPlanIsTheConfigsAndThePlannersChoice) {
  config::RunConfig c;
  c.base_model = test::llama_fixture().base;
  c.offload_prefetch_depth = 2;
  const auto resident = plan_device(c, at::kCPU);
  EXPECT_EQ(resident.residency.num_layers(), 3);
  EXPECT_TRUE(resident.residency.streamed_layers().empty());
  EXPECT_EQ(resident.copy_engine, nullptr);

  c.offload_layers = 2;
  c.activation_offloading = true;
  const auto offloaded = plan_device(c, at::kCPU);
  ASSERT_TRUE(offloaded.memory.has_value());
  EXPECT_EQ(offloaded.residency.host_layers(), offloaded.memory->offloaded_layers);
  EXPECT_EQ(offloaded.residency.host_layers().size(), 2u);
  EXPECT_EQ(offloaded.residency.weight_slots(), offloaded.memory->num_slots);
  EXPECT_EQ(offloaded.residency.prefetch_depth(), 2);
  EXPECT_TRUE(offloaded.residency.offload_activations());
  EXPECT_NE(offloaded.copy_engine, nullptr);

  c.shard_base = true;
  const auto sharded = plan_device(c, at::kCPU, 2);
  EXPECT_EQ(sharded.residency.streamed_layers().size(), 3u);
  EXPECT_EQ(sharded.residency.weight_slots(), sharded.memory->num_slots);
  for (const int64_t l : sharded.memory->offloaded_layers) {
    EXPECT_EQ(sharded.residency.weights(l), schedule::WeightHome::host_shard) << l;
  }
}

TEST(PinnedMemory, APlanPinningMoreThanThreeQuartersOfTheAvailableRamIsRefused) {
  EXPECT_EQ(pinned_memory_problem(pinning(10 * kGiB, 2 * kGiB), 16 * kGiB), "");
  const auto problem = pinned_memory_problem(pinning(10 * kGiB, 3 * kGiB), 16 * kGiB);
  EXPECT_EQ(problem,
            "the plan pins 13.00 GiB of host RAM (10.00 GiB for offloaded layers, 3.00 GiB for offloaded activations), "
            "more than three quarters of the 16.00 GiB this machine has available (MemAvailable in /proc/meminfo); "
            "pinned memory cannot be swapped out. Offload fewer layers (offload_layers), set activation_offloading: "
            "false, or lower sequence_len or micro_batch_size");
  EXPECT_EQ(pinned_memory_problem(pinning(0, 0), 0), "") << "nothing pinned";
  EXPECT_EQ(pinned_memory_problem(pinning(kGiB, kGiB), -1), "") << "MemAvailable unknown";
}

TEST(PinnedMemory, ThisMachinesAvailableRamIsRead) {
  EXPECT_GT(host_memory_available_bytes(), 64 * (int64_t{1} << 20));
}

}  // namespace
}  // namespace qtrain::engine::train
