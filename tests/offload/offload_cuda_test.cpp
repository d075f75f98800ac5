// Offload on a real GPU (label gpu; each test skips itself without one): the CUDA copy engine
// fills slots from pinned host blobs on its own stream and acquire orders the compute after the
// copy; a ticket whose slot was refilled is refused; and training with offloaded layers (prefetch
// depth 1 and 2) gives losses and LoRA gradients bitwise identical to training with every layer
// resident, in bfloat16 with NF4 and INT8 bases; offloaded activations (device to pinned host and
// back) train bitwise as the run that keeps them, and tiled MLPs to bf16 rounding.
#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "engine/schedule/offloaded_activations.h"
#include "engine/schedule/offloaded_weights.h"
#include "engine/schedule/tiled_mlp.h"
#include "offload/host_store.h"
#include "offload/slot_ring.h"
#include "tests/expect_error.h"
#include "tests/offload_training.h"

namespace qtrain::offload {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device"

// Whether the driver knows `t`'s memory as page-locked host memory. Tensor::is_pinned() asks
// torch's caching host allocator, which in torch 2.11 says false for cudaHostAlloc'd memory it
// did not hand out (the first GPU run found it so, while the copies ran at 54 GB/s).
bool page_locked(const at::Tensor& t) {
  cudaPointerAttributes attributes{};
  return cudaPointerGetAttributes(&attributes, t.data_ptr()) == cudaSuccess && attributes.type == cudaMemoryTypeHost;
}

TEST(CudaSlotRing, BlobsArriveIntactFromPinnedMemoryAndStaleTicketsAreRefused) {
  SKIP_WITHOUT_GPU();
  auto engine = make_cuda_copy_engine(at::Device(at::kCUDA, 0));
  HostStore store(engine);
  // 64 MiB blobs: long enough copies that a compute not waiting for them would read old bytes.
  std::vector<at::Tensor> layers;
  for (int64_t l = 0; l < 3; ++l) {
    layers.push_back(at::randint(0, 255, {64 << 20}, at::kByte));
    store.add(l, {layers.back()});
    EXPECT_TRUE(page_locked(store.blob(l)));
  }
  SlotRing ring(store, 2);
  for (int64_t l : {0, 1, 2, 1, 0}) {
    const auto lease = ring.acquire(ring.prefetch(l));
    // A kernel on the compute stream reads the slot: it must see the whole copy.
    const auto sum = lease.tensors[0].to(at::kLong).sum().item<int64_t>();
    EXPECT_EQ(sum, layers[l].to(at::kLong).sum().item<int64_t>()) << "layer " << l;
    ring.release(lease);
  }
  const auto t0 = ring.prefetch(0);
  ring.prefetch(1);
  ring.prefetch(2);  // evicts layer 0's reservation
  test::expect_error([&] { ring.acquire(t0); }, "stale device slot: acquiring layer 0");
}

struct Variant {
  engine::model::QuantSpec::Kind kind;
  int64_t depth;
  std::string name;
  friend void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }
};

class CudaOffloadEquivalence : public testing::TestWithParam<Variant> {};

TEST_P(CudaOffloadEquivalence, LossesAndLoraGradientsAreBitwiseIdentical) {
  SKIP_WITHOUT_GPU();
  const auto& v = GetParam();
  const at::Device cuda(at::kCUDA, 0);
  using engine::schedule::CheckpointPolicy;
  auto resident = test::load_llama_with_lora(v.kind, at::kBFloat16, cuda);
  const auto want = test::two_steps(resident, nullptr, CheckpointPolicy::every_layer);
  // The reference itself must be reproducible, or bitwise equality below would mean nothing.
  const auto again = test::two_steps(resident, nullptr, CheckpointPolicy::every_layer);
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_TRUE(test::bitwise_equal(again.grads[i], want.grads[i])) << "resident run not deterministic, gradient " << i;
  }
  for (const std::vector<int64_t>& layers : {std::vector<int64_t>{1}, {0, 2}, {0, 1, 2}}) {
    auto lm = test::load_llama_with_lora(v.kind, at::kBFloat16, cuda);
    auto offloaded =
        engine::schedule::offload_to_host(lm, test::offload_plan(lm, layers, v.depth), make_cuda_copy_engine(cuda));
    const auto got = test::two_steps(lm, offloaded, CheckpointPolicy::every_layer);
    const std::string what = v.name + ", " + std::to_string(layers.size()) + " layers offloaded";
    test::expect_same_steps(got, want, what);
    EXPECT_EQ(offloaded->stats().unprepared_acquisitions, 0) << what;
  }
}

// Offloaded activations through the CUDA copy engine (device to pinned host and back, on its own
// stream): bitwise the run that keeps them; tiled MLPs on top: losses and gradients to bf16
// rounding (cuBLAS may pick another kernel for a chunk's row count than for the whole).
TEST(CudaActivationOffload, TrainsBitwiseAsTheRunThatKeepsTheInputs) {
  SKIP_WITHOUT_GPU();
  const at::Device cuda(at::kCUDA, 0);
  using engine::schedule::CheckpointPolicy;
  auto kept = test::load_llama_with_lora(engine::model::QuantSpec::Kind::nf4, at::kBFloat16, cuda);
  const auto want = test::two_steps(kept, nullptr, CheckpointPolicy::every_layer);
  auto lm = test::load_llama_with_lora(engine::model::QuantSpec::Kind::nf4, at::kBFloat16, cuda);
  auto engine = make_cuda_copy_engine(cuda);
  auto activations = std::make_shared<engine::schedule::OffloadedActivations>(engine, 1);
  const auto got = test::two_steps(lm, nullptr, CheckpointPolicy::every_layer, activations);
  EXPECT_EQ(activations->copies_out(), got.checkpointed - 2) << "all but the last two (depth + 1) left";
  test::expect_same_steps(got, want, "activations offloaded");
  auto tiled_lm = test::load_llama_with_lora(engine::model::QuantSpec::Kind::nf4, at::kBFloat16, cuda, 0.0);
  auto untiled_lm = test::load_llama_with_lora(engine::model::QuantSpec::Kind::nf4, at::kBFloat16, cuda, 0.0);
  const auto untiled = test::two_steps(untiled_lm, nullptr, CheckpointPolicy::every_layer);
  const auto tiled = test::two_steps(tiled_lm,
                                     nullptr,
                                     CheckpointPolicy::every_layer,
                                     std::make_shared<engine::schedule::OffloadedActivations>(engine, 1),
                                     std::make_shared<engine::schedule::TiledMlp>(3));
  const double loss = untiled.losses[0].item<double>();
  EXPECT_NEAR(tiled.losses[0].item<double>(), loss, 1e-3 * std::abs(loss));
  for (size_t i = 0; i < untiled.grads.size(); ++i) {
    const double scale = untiled.grads[i].abs().max().item<double>();
    EXPECT_LE((tiled.grads[i] - untiled.grads[i]).abs().max().item<double>(), 2e-2 * scale) << "gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Bases,
                         CudaOffloadEquivalence,
                         testing::Values(Variant{engine::model::QuantSpec::Kind::nf4, 1, "nf4_depth1"},
                                         Variant{engine::model::QuantSpec::Kind::nf4, 2, "nf4_depth2"},
                                         Variant{engine::model::QuantSpec::Kind::int8, 1, "int8_depth1"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace qtrain::offload
