// Tests for offload/prefetch_depth: the slots a depth takes (one computing, one per layer in
// flight, never more than the layers), and the one refusal of a depth below 1 that offloaded
// layers, a sharded base, offloaded activations and the planner share.
#include "offload/prefetch_depth.h"

#include <gtest/gtest.h>

#include "tests/expect_error.h"

namespace qtrain::offload {
namespace {

TEST(PrefetchDepth, SlotsAreOneComputingAndOnePerLayerInFlight) {
  EXPECT_EQ(slots_for(8, 1), 2);
  EXPECT_EQ(slots_for(8, 3), 4);
  EXPECT_EQ(slots_for(2, 3), 2) << "never more slots than layers";
  EXPECT_EQ(slots_for(0, 1), 0);
}

TEST(PrefetchDepth, ADepthBelowOneIsRefusedNamingTheKey) {
  test::expect_error([] { check_prefetch_depth(0); }, "offload_prefetch_depth is 0; use 1");
  test::expect_error([] { slots_for(4, -1); }, "offload_prefetch_depth is -1");
}

}  // namespace
}  // namespace qtrain::offload
