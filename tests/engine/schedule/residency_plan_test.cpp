// Tests for engine/schedule/residency_plan: where each layer's weights live for each request
// (resident, offloaded to host memory, sharded, sharded with host slices), the layers that stream
// and the slots they take; a bad layer list or depth is refused by name.
#include "engine/schedule/residency_plan.h"

#include <gtest/gtest.h>

#include "tests/expect_error.h"

namespace qtrain::engine::schedule {
namespace {

using V = std::vector<int64_t>;

TEST(ResidencyPlan, EveryLayerOnTheDeviceByDefault) {
  const ResidencyPlan plan(4);
  for (int64_t l = 0; l < 4; ++l) EXPECT_EQ(plan.weights(l), WeightHome::device) << l;
  EXPECT_EQ(plan.streamed_layers(), V{});
  EXPECT_EQ(plan.host_layers(), V{});
  EXPECT_EQ(plan.weight_slots(), 0);
  EXPECT_FALSE(plan.shard_base());
  EXPECT_FALSE(plan.offload_activations());
  EXPECT_EQ(plan.prefetch_depth(), 1);
}

TEST(ResidencyPlan, OffloadedLayersStreamFromHostThroughDepthPlusOneSlots) {
  const ResidencyPlan plan(5, {{3, 0, 4}, false, 1, true});
  EXPECT_EQ(plan.weights(0), WeightHome::host);
  EXPECT_EQ(plan.weights(1), WeightHome::device);
  EXPECT_FALSE(plan.streamed(2));
  EXPECT_TRUE(plan.streamed(3));
  EXPECT_EQ(plan.host_layers(), (V{0, 3, 4}));
  EXPECT_EQ(plan.streamed_layers(), (V{0, 3, 4}));
  EXPECT_EQ(plan.weight_slots(), 2);
  EXPECT_EQ(ResidencyPlan(5, {{3, 0, 4}, false, 2, false}).weight_slots(), 3);
  EXPECT_EQ(ResidencyPlan(5, {{3, 0, 4}, false, 5, false}).weight_slots(), 3) << "never more slots than layers";
  EXPECT_TRUE(plan.offload_activations());
}

TEST(ResidencyPlan, AShardedBaseStreamsEveryLayerAndKeepsTheOffloadedSlicesOnTheHost) {
  const ResidencyPlan plan(4, {{1}, true, 2, false});
  EXPECT_EQ(plan.weights(0), WeightHome::shard);
  EXPECT_EQ(plan.weights(1), WeightHome::host_shard);
  EXPECT_EQ(plan.streamed_layers(), (V{0, 1, 2, 3}));
  EXPECT_EQ(plan.host_layers(), V{1});
  EXPECT_EQ(plan.weight_slots(), 3);
  EXPECT_TRUE(plan.shard_base());
}

TEST(ResidencyPlan, ABadLayerListOrDepthIsRefusedByName) {
  test::expect_error(
      [] {
        ResidencyPlan(3, {{3}, false, 1, false});
      },
      "cannot offload layer 3: the model has layers 0..2");
  test::expect_error([] { ResidencyPlan(3, {{-1}, true, 1, false}); }, "cannot offload layer -1");
  test::expect_error([] { ResidencyPlan(3, {{0, 0}, false, 1, false}); }, "layer 0 is listed twice for offloading");
  test::expect_error([] { ResidencyPlan(3, {{}, false, 0, false}); }, "offload_prefetch_depth is 0");
}

}  // namespace
}  // namespace qtrain::engine::schedule
