// The NCCL process group on real GPUs (label gpu; each test skips itself without enough of them):
// one rank on one GPU connects and its collectives are exact copies (the path a one-GPU machine
// can check: communicator setup, sums, byte gathers, barrier, shutdown), and two ranks on two GPUs
// sum and gather exactly, as the Gloo tests check on the CPU (engine/dist/comm_test.cpp).
#include <functional>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "engine/dist/comm.h"
#include "engine/dist/nccl_backend.h"
#include "tests/free_port.h"

namespace qtrain::engine::dist {
namespace {

int64_t gpus() {
  return at::hasCUDA() ? at::detail::getCUDAHooks().deviceCount() : 0;
}

TEST(NcclBackend, OneRankOnOneGpuConnectsAndItsCollectivesAreExact) {
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(nccl_built());
  const at::Device gpu(at::kCUDA, 0);
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto pg = make_nccl_backend(store, 0, 1, std::chrono::milliseconds(60000), gpu);
  auto values = at::randn({4096}, at::TensorOptions(gpu).dtype(at::kBFloat16));
  auto sum = values.clone();
  std::vector<at::Tensor> v = {sum};
  pg->allreduce(v)->wait();
  EXPECT_TRUE(at::equal(sum.cpu(), values.cpu()));
  // Packed 4-bit bytes, as a sharded base gathers them.
  auto bytes = at::randint(0, 256, {1000}, at::TensorOptions(gpu).dtype(at::kByte));
  auto gathered = at::empty_like(bytes);
  pg->_allgather_base(gathered, bytes)->wait();
  EXPECT_TRUE(at::equal(gathered.cpu(), bytes.cpu()));
  pg->barrier()->wait();
  pg->shutdown();
}

TEST(NcclBackend, TwoRanksOnTwoGpusSumAndGatherExactly) {
  if (gpus() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const int port = test::free_port();
  std::vector<at::Tensor> sums(2), gathers(2);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        DistEnv e;
        e.rank = e.local_rank = r;
        e.world_size = e.local_world_size = 2;
        e.master_addr = "127.0.0.1";
        e.master_port = port;
        const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(r));
        Comm comm(e, std::chrono::seconds(60), DdpBackend::nccl, gpu);
        auto t = at::full({1000}, static_cast<float>(r + 1), at::kFloat);  // a host tensor travels through the GPU
        comm.allreduce_sum(t, "summing");
        sums[r] = t;
        gathers[r] = comm.allgather(at::full({3}, static_cast<uint8_t>(r + 7), at::kByte), "gathering");
        comm.barrier("ending");
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "rank " << r << ": " << ex.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(sums[r].defined() && gathers[r].defined());
    EXPECT_TRUE(sums[r].is_cpu());
    EXPECT_TRUE(at::equal(sums[r], at::full({1000}, 3.0f)));
    EXPECT_EQ(gathers[r][0][0].item<uint8_t>(), 7);
    EXPECT_EQ(gathers[r][1][0].item<uint8_t>(), 8);
  }
}

}  // namespace
}  // namespace qtrain::engine::dist
