// The memory planner's arithmetic: auto offloads the fewest layers that fit (and one fewer does
// not), offloaded layers are spread evenly and always checkpointed, slots and PCIe traffic
// follow from the offloaded blobs, a plan that cannot fit says by how much and why, and bad
// requests are refused with the key to fix.
#include "offload/planner.h"

#include <gtest/gtest.h>

#include <numeric>

#include "offload/blob_layout.h"
#include "tests/expect_error.h"

namespace qtrain::offload {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// n layers of 100 MiB, checkpointed or not, with round activation costs.
PlanInputs inputs(int64_t n, bool checkpointed) {
  PlanInputs in;
  for (int64_t i = 0; i < n; ++i) {
    in.layers.push_back(LayerCost{.blob_bytes = 100 * kMiB,
                                  .saved_checkpointed = 8 * kMiB,
                                  .saved_full = 64 * kMiB,
                                  .backward_transient = 32 * kMiB,
                                  .checkpointed = checkpointed});
  }
  in.fixed_bytes = 1 * kGiB;
  in.lora_bytes = 50 * kMiB;
  in.saved_outside_layers = 10 * kMiB;
  in.loss_workspace = 40 * kMiB;
  in.library_workspace = 64 * kMiB;
  in.micro_batches_per_step = 4;
  return in;
}

PlanRequest request(int64_t budget, std::optional<int64_t> offload = std::nullopt) {
  PlanRequest r;
  r.budget_bytes = budget;
  r.offload_layers = offload;
  return r;
}

int64_t sum_rows(const MemoryPlan& p) {
  int64_t sum = 0;
  for (const PlanRow& r : p.rows) sum += r.bytes;
  return sum;
}

TEST(Planner, SpreadLayersPicksKDistinctEvenlySpacedLayers) {
  EXPECT_EQ(spread_layers(0, 32), std::vector<int64_t>{});
  EXPECT_EQ(spread_layers(4, 32), (std::vector<int64_t>{4, 12, 20, 28}));
  EXPECT_EQ(spread_layers(1, 5), std::vector<int64_t>{2});
  for (int64_t n = 1; n <= 40; ++n) {
    for (int64_t k = 0; k <= n; ++k) {
      SCOPED_TRACE(std::to_string(k) + " of " + std::to_string(n));
      const auto picks = spread_layers(k, n);
      ASSERT_EQ(static_cast<int64_t>(picks.size()), k);
      for (size_t j = 0; j < picks.size(); ++j) {
        EXPECT_GE(picks[j], 0);
        EXPECT_LT(picks[j], n);
        if (j > 0) {
          EXPECT_GT(picks[j], picks[j - 1]);
        }
      }
      // Even: consecutive picks are floor(n/k) or ceil(n/k) apart.
      for (size_t j = 1; j < picks.size(); ++j) {
        const int64_t gap = picks[j] - picks[j - 1];
        EXPECT_GE(gap, n / k);
        EXPECT_LE(gap, (n + k - 1) / k);
      }
    }
  }
  test::expect_error([] { spread_layers(5, 4); }, "cannot choose 5 of 4 layers");
}

TEST(Planner, AutoOffloadsTheFewestLayersThatFit) {
  const auto in = inputs(32, true);
  const MemoryPlan none = plan_memory(in, request(64 * kGiB));
  ASSERT_TRUE(none.fits);
  EXPECT_TRUE(none.offloaded_layers.empty());
  EXPECT_EQ(none.num_slots, 0);
  // Budgets that force 1..31 offloaded layers: each plan fits, one layer fewer does not.
  for (const int64_t budget : {none.total_bytes - 1, none.total_bytes - 700 * kMiB, none.total_bytes - 2 * kGiB}) {
    const MemoryPlan p = plan_memory(in, request(budget));
    SCOPED_TRACE(format_plan(p));
    ASSERT_TRUE(p.fits);
    EXPECT_TRUE(p.auto_offload);
    const auto k = static_cast<int64_t>(p.offloaded_layers.size());
    ASSERT_GT(k, 0);
    EXPECT_EQ(p.offloaded_layers, spread_layers(k, 32));
    EXPECT_LE(p.total_bytes, budget);
    const MemoryPlan fewer = plan_memory(in, request(budget, k - 1));
    EXPECT_FALSE(fewer.fits);
    EXPECT_GT(fewer.total_bytes, budget);
  }
}

TEST(Planner, TotalIsTheSumOfItsParts) {
  // 4 of 8 layers offloaded, prefetch depth 1: 2 slots; every layer checkpointed.
  const auto in = inputs(8, true);
  const MemoryPlan p = plan_memory(in, request(100 * kGiB, 4));
  EXPECT_EQ(p.offloaded_layers, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(p.num_slots, 2);
  EXPECT_EQ(p.slot_bytes, 100 * kMiB);
  EXPECT_EQ(p.host_bytes, 400 * kMiB);
  EXPECT_EQ(p.num_checkpointed, 8);
  const int64_t resident = 4 * 100 * kMiB;
  const int64_t slots = 2 * 100 * kMiB;
  const int64_t saved = 8 * 8 * kMiB + 10 * kMiB;
  const int64_t transient = 64 * kMiB + 32 * kMiB;  // a checkpointed layer's recompute + backward
  const int64_t allocated = resident + slots + 1 * kGiB + 50 * kMiB + saved + transient + 64 * kMiB;
  const auto reserve = static_cast<int64_t>(std::ceil(allocated * kFragmentationReserve));
  EXPECT_EQ(p.total_bytes, allocated + reserve + kCudaContextBytes);
  EXPECT_EQ(p.allocated_bytes, allocated);  // what the allocator's peak is compared with
  EXPECT_EQ(sum_rows(p), p.total_bytes);
  EXPECT_EQ(p.min_resident_gap, 0);  // layer 7 is the last
}

TEST(Planner, OffloadedLayersAreCheckpointed) {
  // Policy none: offloading a layer also drops its full activations for its input.
  const auto in = inputs(8, false);
  const MemoryPlan none = plan_memory(in, request(100 * kGiB, 0));
  const MemoryPlan two = plan_memory(in, request(100 * kGiB, 2));
  EXPECT_EQ(none.num_checkpointed, 0);
  EXPECT_EQ(two.num_checkpointed, 2);
  const auto activations = [](const MemoryPlan& p) {
    for (const PlanRow& r : p.rows) {
      if (r.what == "activations kept for backward") return r.bytes;
    }
    return int64_t{-1};
  };
  EXPECT_EQ(activations(none), 8 * 64 * kMiB + 10 * kMiB);
  EXPECT_EQ(activations(two), 6 * 64 * kMiB + 2 * 8 * kMiB + 10 * kMiB);
}

TEST(Planner, SlotsAndTrafficFollowTheOffloadedBlobs) {
  auto in = inputs(10, true);
  for (int64_t i = 0; i < 10; ++i) in.layers[i].blob_bytes = (100 + i) * kMiB;
  PlanRequest r = request(100 * kGiB, 3);
  r.prefetch_depth = 2;
  r.h2d_bytes_per_s = 20e9;
  const MemoryPlan p = plan_memory(in, r);
  ASSERT_EQ(p.offloaded_layers, (std::vector<int64_t>{1, 5, 8}));
  EXPECT_EQ(p.num_slots, 3);
  EXPECT_EQ(p.slot_bytes, 108 * kMiB);
  EXPECT_EQ(p.host_bytes, (101 + 105 + 108) * kMiB);
  // Forward and recompute, in each of 4 micro-batches.
  EXPECT_EQ(p.h2d_bytes_per_step, 2 * 4 * (101 + 105 + 108) * kMiB);
  EXPECT_DOUBLE_EQ(p.h2d_seconds_per_step, static_cast<double>(p.h2d_bytes_per_step) / 20e9);
  EXPECT_EQ(p.min_resident_gap, 1);  // layers 0, 2-4, 6-7, 9 are resident
  // Slots never outnumber the offloaded layers.
  r.offload_layers = 1;
  EXPECT_EQ(plan_memory(in, r).num_slots, 1);
}

TEST(Planner, APlanThatCannotFitSaysByHowMuchAndWhy) {
  const auto in = inputs(8, true);
  const MemoryPlan p = plan_memory(in, request(1 * kGiB));
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.offloaded_layers.size(), 8u);  // auto tried everything
  EXPECT_NE(p.advice.find("more than the budget of 1.00 GiB, even with every layer offloaded"), std::string::npos)
      << p.advice;
  EXPECT_NE(p.advice.find("embeddings, output head, norms, biases (1.00 GiB)"), std::string::npos) << p.advice;
  const std::string table = format_plan(p);
  EXPECT_NE(table.find("does not fit"), std::string::npos) << table;
  EXPECT_NE(table.find(p.advice), std::string::npos) << table;
  // A fixed number that does not fit says so too, without claiming everything was tried.
  const MemoryPlan fixed = plan_memory(in, request(2 * kGiB, 1));
  EXPECT_FALSE(fixed.fits);
  EXPECT_EQ(fixed.advice.find("even with every layer"), std::string::npos);
  EXPECT_TRUE(plan_memory(in, request(100 * kGiB)).advice.empty());
}

TEST(Planner, TableListsEveryPartTheTotalAndThePlan) {
  const auto in = inputs(32, true);
  const MemoryPlan p = plan_memory(in, request(plan_memory(in, request(64 * kGiB)).total_bytes - 1));
  const std::string table = format_plan(p);
  for (const PlanRow& r : p.rows) EXPECT_NE(table.find(r.what), std::string::npos) << r.what;
  EXPECT_NE(table.find("total"), std::string::npos);
  EXPECT_NE(table.find("fits, "), std::string::npos) << table;
  // One or two offloaded layers need as many slots as they free: the first saving takes three.
  EXPECT_NE(table.find("offload 3 of 32 layers [5 16 26] to pinned host RAM, 2 device slots"), std::string::npos)
      << table;
  EXPECT_NE(table.find("(offload_layers: auto)"), std::string::npos) << table;
  EXPECT_NE(table.find("PCIe traffic per step: 2.34 GiB (3 layers x 2 copies x 4 micro-batches)"), std::string::npos)
      << table;
}

TEST(Planner, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(100 * kMiB), "100.0 MiB");
  EXPECT_EQ(format_bytes(24 * kGiB), "24.00 GiB");
  EXPECT_EQ(format_bytes(-kGiB / 2), "-512.0 MiB");
}

TEST(Planner, RefusesBadRequestsNamingTheKey) {
  const auto in = inputs(4, true);
  test::expect_error([&] { plan_memory(in, request(0)); }, "the GPU memory budget is 0 bytes");
  test::expect_error([&] { plan_memory(in, request(kGiB, 5)); },
                     "offload_layers is 5 but the model has 4 decoder layers; use 0 to 4, or auto");
  PlanRequest r = request(kGiB);
  r.prefetch_depth = 0;
  test::expect_error([&] { plan_memory(in, r); }, "offload_prefetch_depth is 0");
  r.prefetch_depth = 1;
  r.world_size = 0;
  test::expect_error([&] { plan_memory(in, r); }, "the world size is 0; use 1 or more ranks");
}

TEST(Planner, AShardedBaseKeepsOnePaddedShardPerLayerAndGathersWholeLayers) {
  // Blobs that are not a multiple of N * 256 bytes, so the padding shows.
  auto in = inputs(4, /*checkpointed=*/false);
  for (size_t i = 0; i < in.layers.size(); ++i) in.layers[i].blob_bytes = 100 * kMiB + 1000 + 300 * i;
  const auto whole = plan_memory(in, request(100 * kGiB, 0));
  for (const int64_t world : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    auto r = request(100 * kGiB, 1);
    r.world_size = world;
    r.shard_base = true;
    const auto p = plan_memory(in, r);
    const int64_t unit = world * kBlobAlignment;
    int64_t kept_resident = 0, largest = 0, received = 0;
    for (size_t i = 0; i < in.layers.size(); ++i) {
      const int64_t padded = (in.layers[i].blob_bytes + unit - 1) / unit * unit;
      ASSERT_EQ(padded % world, 0);
      if (i != 2) kept_resident += padded / world;  // spread_layers(1, 4) offloads layer 2
      largest = std::max(largest, padded);
      received += padded - padded / world;
    }
    EXPECT_EQ(p.offloaded_layers, std::vector<int64_t>{2});
    EXPECT_EQ(p.rows[0].bytes, kept_resident);
    const int64_t padded2 = (in.layers[2].blob_bytes + unit - 1) / unit * unit;
    EXPECT_EQ(p.host_bytes, padded2 / world);  // the offloaded layer's shard, in pinned host RAM
    // Every layer passes through the slots, so every layer is recomputed.
    EXPECT_EQ(p.num_slots, 2);
    EXPECT_EQ(p.slot_bytes, largest);
    EXPECT_EQ(p.num_checkpointed, 4);
    EXPECT_EQ(p.h2d_bytes_per_step, 2 * p.host_bytes * in.micro_batches_per_step);
    EXPECT_EQ(p.gather_bytes_per_step, 2 * received * in.micro_batches_per_step);
    EXPECT_EQ(sum_rows(p), p.total_bytes);
    // More ranks, less of the base on each; the unsharded plan keeps it all.
    if (world > 1) {
      EXPECT_LT(p.rows[0].bytes * world, whole.rows[0].bytes + 4 * unit);
    }
    const auto table = format_plan(p);
    EXPECT_NE(table.find("base sharded over " + std::to_string(world) + " ranks"), std::string::npos) << table;
    EXPECT_NE(table.find("all-gather traffic per step and rank"), std::string::npos) << table;
  }
  EXPECT_EQ(whole.gather_bytes_per_step, 0);
  EXPECT_EQ(whole.num_checkpointed, 0);
}

// Activation offloading: of the checkpointed inputs only prefetch_depth + 2 are on the device at
// once, all but the last prefetch_depth + 1 go to pinned host RAM, and each of those crosses twice
// per micro-batch.
TEST(Planner, OffloadedActivationsLeaveOnlyTheInFlightInputsOnTheDevice) {
  for (const int64_t depth : {1, 2}) {
    auto r = request(64 * kGiB, 0);
    r.prefetch_depth = depth;
    const auto kept = plan_memory(inputs(10, true), r);
    r.offload_activations = true;
    const auto moved = plan_memory(inputs(10, true), r);
    EXPECT_EQ(kept.activation_host_bytes, 0);
    EXPECT_EQ(moved.activation_host_bytes, (10 - (depth + 1)) * 8 * kMiB) << "the last depth + 1 stay";
    EXPECT_EQ(kept.allocated_bytes - moved.allocated_bytes, (10 - (depth + 2)) * 8 * kMiB) << "depth " << depth;
    EXPECT_EQ(moved.h2d_bytes_per_step, 2 * (10 - (depth + 1)) * 8 * kMiB * 4);
    EXPECT_EQ(sum_rows(moved), moved.total_bytes);
    const auto table = format_plan(moved);
    const std::string host = format_bytes((10 - (depth + 1)) * 8 * kMiB);
    EXPECT_NE(table.find("10 checkpointed layers (" + format_bytes((depth + 2) * 8 * kMiB) + " on the device, " + host +
                         " in pinned host RAM)"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("activation offloading: their inputs wait in pinned host RAM (" + host + ")"),
              std::string::npos)
        << table;
  }
  // Fewer checkpointed layers than can be in flight: all of them stay.
  auto r = request(64 * kGiB, 0);
  r.offload_activations = true;
  r.prefetch_depth = 4;
  EXPECT_EQ(plan_memory(inputs(3, true), r).allocated_bytes,
            plan_memory(inputs(3, true), request(64 * kGiB, 0)).allocated_bytes);
}

}  // namespace
}  // namespace qtrain::offload
