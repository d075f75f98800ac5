// The offload machinery on the simulated copy engine (a worker thread that delays every copy):
// blob layouts round-trip every dtype at aligned offsets; acquire waits for the copy (a compute
// that did not would read the slot's old contents); a slot is refilled only after the compute
// fence of its last reader; a ticket whose slot was refilled is refused by name; a tensor
// autograd saved from a slot fails in backward once the slot is refilled; layers still in a
// slot are reused without a copy.
#include <chrono>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "offload/host_store.h"
#include "offload/simulated_copy_engine.h"
#include "offload/slot_ring.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::offload {
namespace {

using namespace std::chrono_literals;

// Layer `l`'s tensors: distinct values per layer, mixed dtypes and sizes that are no multiple
// of the alignment.
std::vector<at::Tensor> layer_tensors(int64_t l) {
  at::manual_seed(100 + l);
  return {at::randint(0, 255, {37, 3}, at::kByte),
          at::randn({5}, at::kFloat),
          at::randn({3, 7}, at::kBFloat16),
          at::randint(-128, 127, {4, 9}, at::kChar)};
}

void expect_layer(const std::vector<at::Tensor>& got, int64_t l) {
  const auto want = layer_tensors(l);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(test::bitwise_equal(got[i], want[i])) << "layer " << l << " tensor " << i;
  }
}

HostStore store_of(std::shared_ptr<CopyEngine> engine, int64_t layers) {
  HostStore store(std::move(engine));
  for (int64_t l = 0; l < layers; ++l) store.add(l, layer_tensors(l));
  return store;
}

TEST(BlobLayout, PacksEveryDtypeAtAlignedOffsetsAndViewsShareTheBlob) {
  const auto tensors = layer_tensors(0);
  const auto layout = BlobLayout::of(tensors);
  for (const auto& e : layout.entries()) EXPECT_EQ(e.offset % kBlobAlignment, 0);
  EXPECT_EQ(layout.total_bytes(), blob_bytes({111, 20, 42, 36}));
  EXPECT_EQ(layout.total_bytes(), 4 * kBlobAlignment);
  auto blob = at::zeros({layout.total_bytes()}, at::kByte);
  layout.pack({tensors[0], tensors[1], tensors[2].t().contiguous().t(), tensors[3]}, blob);
  const auto views = layout.views(blob);
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(test::bitwise_equal(views[i], tensors[i])) << i;
  EXPECT_EQ(views[1].data_ptr<float>(),
            reinterpret_cast<float*>(blob.data_ptr<uint8_t>() + layout.entries()[1].offset));
  test::expect_error(
      [&] {
        layout.pack({tensors[1], tensors[0], tensors[2], tensors[3]}, blob);
      },
      "but the blob layout has");
  test::expect_error([&] { layout.views(at::zeros({10}, at::kByte)); }, "at least 1024 bytes");
}

TEST(SlotRing, AcquireWaitsForTheCopy) {
  auto engine = std::make_shared<SimulatedCopyEngine>(SimulatedCopyOptions{20ms, false});
  auto store = store_of(engine, 3);
  SlotRing ring(store, 2);
  EXPECT_EQ(ring.slot_bytes(), store.max_fill_bytes());
  for (int64_t l : {0, 1, 2, 0}) {
    const auto lease = ring.acquire(ring.prefetch(l));  // the copy is still sleeping here
    expect_layer(lease.tensors, l);
    ring.release(lease);
  }
  EXPECT_EQ(ring.stats().copies, 4);
  EXPECT_EQ(ring.stats().copied_bytes, 4 * store.blob(0).numel());
}

TEST(SlotRing, RefillsASlotOnlyAfterTheComputeThatReadItFinished) {
  auto engine = std::make_shared<SimulatedCopyEngine>(SimulatedCopyOptions{0us, /*manual_compute_fences=*/true});
  auto store = store_of(engine, 2);
  SlotRing ring(store, 1);
  engine->finish_compute();  // the compute enqueued before the ring was made
  const auto lease0 = ring.acquire(ring.prefetch(0));
  ring.release(lease0);  // the "GPU" is still reading layer 0
  const auto before = lease0.tensors[1].clone();
  const auto ticket1 = ring.prefetch(1);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(engine->copies_done(), 1) << "the copy of layer 1 started before the compute fence of layer 0";
  EXPECT_TRUE(test::bitwise_equal(lease0.tensors[1], before)) << "slot overwritten while being read";
  engine->finish_compute();
  const auto lease1 = ring.acquire(ticket1);
  EXPECT_EQ(engine->copies_done(), 2);
  expect_layer(lease1.tensors, 1);
  ring.release(lease1);
}

TEST(SlotRing, FirstCopyIntoANewSlotWaitsForTheComputeEnqueuedBeforeIt) {
  auto engine = std::make_shared<SimulatedCopyEngine>(SimulatedCopyOptions{0us, /*manual_compute_fences=*/true});
  auto store = store_of(engine, 1);
  SlotRing ring(store, 1);  // its buffer may be memory that compute still reads
  const auto ticket = ring.prefetch(0);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(engine->copies_done(), 0) << "the first copy into a new slot did not wait for the compute before it";
  engine->finish_compute();
  const auto lease = ring.acquire(ticket);
  EXPECT_EQ(engine->copies_done(), 1);
  expect_layer(lease.tensors, 0);
  ring.release(lease);
}

TEST(SlotRing, AStaleTicketIsRefusedNeverRead) {
  auto engine = std::make_shared<SimulatedCopyEngine>();
  auto store = store_of(engine, 3);
  SlotRing ring(store, 2);
  const auto t0 = ring.prefetch(0);
  const auto t1 = ring.prefetch(1);
  EXPECT_EQ(ring.unreserved_slots(), 0);
  // Prefetching further than there are slots evicts the oldest reservation: layer 0's.
  const auto t2 = ring.prefetch(2);
  EXPECT_FALSE(ring.holds(t0));
  EXPECT_TRUE(ring.holds(t1));
  EXPECT_EQ(t2.slot, t0.slot);
  test::expect_error([&] { ring.acquire(t0); },
                     "stale device slot: acquiring layer 0 (generation 1) from slot " + std::to_string(t0.slot) +
                         ", which now holds layer 2 (generation 3)");
  const auto lease = ring.acquire(t2);
  expect_layer(lease.tensors, 2);
  test::expect_error([&] { ring.acquire(t2); }, "layer 2 is already acquired");
  ring.acquire(ring.prefetch(1));
  test::expect_error([&] { ring.prefetch(0); }, "no free device slot for layer 0");
}

TEST(SlotRing, ATensorAutogradSavedFromARefilledSlotFailsInBackward) {
  auto engine = std::make_shared<SimulatedCopyEngine>();
  HostStore store(engine);
  store.add(0, {at::full({4, 4}, 1.0f)});
  store.add(1, {at::full({4, 4}, 2.0f)});
  SlotRing ring(store, 1);
  const auto lease = ring.acquire(ring.prefetch(0));
  const auto x = at::ones({2, 4}).requires_grad_(true);
  const auto y = at::matmul(x, lease.tensors[0]).sum();  // saves the slot view for backward
  ring.release(lease);
  ring.acquire(ring.prefetch(1));  // the slot now holds layer 1
  test::expect_error([&] { y.backward(); }, "modified by an inplace operation");
}

TEST(SlotRing, ALayerStillInASlotIsReusedWithoutACopy) {
  auto engine = std::make_shared<SimulatedCopyEngine>();
  auto store = store_of(engine, 2);
  SlotRing ring(store, 2);
  for (int64_t l : {0, 1, 1, 0}) ring.release(ring.acquire(ring.prefetch(l)));
  EXPECT_EQ(ring.stats().copies, 2);
  EXPECT_EQ(ring.stats().hits, 2);
  // A cancelled reservation frees its slot but keeps the layer for a later hit.
  const auto t = ring.prefetch(0);
  EXPECT_EQ(ring.unreserved_slots(), 1);
  ring.cancel(t);
  EXPECT_EQ(ring.unreserved_slots(), 2);
  EXPECT_TRUE(ring.has(0));
}

}  // namespace
}  // namespace qtrain::offload
