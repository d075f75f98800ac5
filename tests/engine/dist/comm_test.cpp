// The communicator over Gloo with its ranks as threads of this process on 127.0.0.1 (a free port
// per test): sums and gathers are exact and the same on every rank, a run of one needs no store,
// and a collective that loses its peer fails with an error naming that rank. See Note [Naming a
// failed rank] (engine/dist/comm.cpp).
#include "engine/dist/comm.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/dist/nccl_backend.h"
#include "tests/expect_error.h"
#include "tests/thread_ranks.h"

namespace qtrain::engine::dist {
namespace {

using test::run_ranks;

TEST(Comm, ARunOfOneHasNoStoreAndCollectivesAreTheIdentity) {
  DistEnv one;  // no variables: world size 1, no MASTER_ADDR or port to reach
  Comm comm(one, std::chrono::seconds(1));
  auto t = at::arange(6, at::kFloat);
  comm.allreduce_sum(t, "summing");
  EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat)));
  EXPECT_TRUE(at::equal(comm.allgather(t, "gathering"), t.unsqueeze(0)));
  comm.barrier("waiting");
  EXPECT_EQ(comm.seconds(), 0.0);
}

TEST(Comm, SumsAndGathersAreExactAndTheSameOnEveryRank) {
  constexpr int64_t world = 3;
  std::vector<at::Tensor> sums(world), gathers(world);
  run_ranks(world, std::chrono::seconds(30), [&](Comm& comm) {
    const auto r = comm.rank();
    // Float values whose pairwise sums round: the ranks must agree on the rounded bits.
    auto t = at::full({1000}, 0.1f * static_cast<float>(r + 1), at::kFloat) + at::arange(1000, at::kFloat) * 1e-7f;
    comm.allreduce_sum(t, "summing floats");
    auto d = at::tensor({1.0 / 3.0 * static_cast<double>(r + 1)}, at::kDouble);
    comm.allreduce_sum(d, "summing doubles");
    EXPECT_NEAR(d.item<double>(), 2.0, 1e-15);
    auto bytes = at::full({5}, static_cast<uint8_t>(10 * r), at::kByte);
    sums[r] = t;
    gathers[r] = comm.allgather(bytes, "gathering bytes");
    comm.barrier("waiting at the end");
    EXPECT_GT(comm.seconds(), 0.0);
  });
  for (int64_t r = 1; r < world; ++r) EXPECT_TRUE(at::equal(sums[r], sums[0])) << "rank " << r;
  const auto expect = at::arange(1000, at::kFloat) * 1e-7f;
  EXPECT_TRUE(at::allclose(sums[0], 0.6f + 3 * expect, 1e-6, 1e-6));
  for (int64_t r = 0; r < world; ++r) {
    ASSERT_EQ(gathers[r].sizes(), (at::IntArrayRef{world, 5}));
    for (int64_t q = 0; q < world; ++q) EXPECT_EQ(gathers[r][q][0].item<uint8_t>(), 10 * q);
  }
}

// The collectives a sharded base loads with (Note [Sharded base]): a scatter and a broadcast from
// any rank, started and waited for, several in flight at once, and the identity in a run of one.
TEST(Comm, ScattersAndBroadcastsFromAnyRankLandExactly) {
  constexpr int64_t world = 3;
  std::vector<at::Tensor> parts(world), broadcasts(world);
  run_ranks(world, std::chrono::seconds(30), [&](Comm& comm) {
    const auto r = comm.rank();
    const auto whole = at::arange(world * 4, at::kFloat) + 100 * (r + 1);  // only the root's is sent
    auto part = at::empty({4}, at::kFloat);
    auto value = at::full({2}, r == 2 ? int64_t{7} : int64_t{-1}, at::kLong);
    auto scattered = comm.start_scatter(part, r == 1 ? whole : at::Tensor(), 1, "scattering");
    auto broadcast = comm.start_broadcast(value, 2, "broadcasting");
    comm.wait(scattered);
    comm.wait(broadcast);
    parts[r] = part;
    broadcasts[r] = value;
  });
  for (int64_t r = 0; r < world; ++r) {
    EXPECT_TRUE(at::equal(parts[r], at::arange(4 * r, 4 * r + 4, at::kFloat) + 200)) << "rank " << r;
    EXPECT_TRUE(at::equal(broadcasts[r], at::full({2}, int64_t{7}, at::kLong))) << "rank " << r;
  }
  DistEnv one;
  Comm comm(one, std::chrono::seconds(1));
  auto part = at::empty({3}, at::kFloat);
  auto scattered = comm.start_scatter(part, at::arange(3, at::kFloat), 0, "scattering");
  comm.wait(scattered);
  EXPECT_TRUE(at::equal(part, at::arange(3, at::kFloat)));
}

TEST(Comm, ACollectiveThatLosesItsPeerNamesIt) {
  // Rank 1 stops with an error of its own (it announces it, as the trainer does) and leaves; rank
  // 0's next sum fails at once (the socket closes) and names rank 1 with its message.
  std::string message;
  run_ranks(2, std::chrono::seconds(30), [&](Comm& comm) {
    comm.barrier("starting");
    if (comm.rank() == 1) {
      comm.announce_failure(std::runtime_error("data.jsonl line 7: not JSON"));
      return;  // the Comm goes, and its sockets with it
    }
    auto t = at::ones({4});
    try {
      comm.allreduce_sum(t, "summing the gradients of step 3");
      ADD_FAILURE() << "the sum did not fail";
    } catch (const c10::Error& e) {
      message = e.what_without_backtrace();
    }
  });
  EXPECT_NE(message.find("rank 0 of 2: summing the gradients of step 3 failed"), std::string::npos) << message;
  EXPECT_NE(message.find("Rank 1 stopped with: data.jsonl line 7: not JSON"), std::string::npos) << message;
}

TEST(Comm, TheBackendIsNcclOnAGpuAndGlooOnTheCpuUnlessTheConfigSaysOtherwise) {
  const at::Device gpu(at::kCUDA, 0);
  EXPECT_EQ(choose_backend("auto", at::kCPU), DdpBackend::gloo);
  EXPECT_EQ(choose_backend("gloo", at::kCPU), DdpBackend::gloo);
  EXPECT_EQ(choose_backend("gloo", gpu), DdpBackend::gloo);
  EXPECT_EQ(choose_backend("auto", gpu), nccl_built() ? DdpBackend::nccl : DdpBackend::gloo);
  if (nccl_built()) {
    EXPECT_EQ(choose_backend("nccl", gpu), DdpBackend::nccl);
    test::expect_error(
        [] { choose_backend("nccl", at::kCPU); },
        "ddp_backend: nccl runs collectives on GPUs, and this run computes on cpu; use ddp_backend: gloo");
  } else {
    test::expect_error([&] { choose_backend("nccl", gpu); },
                       "built without CUDA, so it has no NCCL; use ddp_backend: gloo");
  }
  test::expect_error([] { choose_backend("mpi", at::kCPU); }, "ddp_backend: mpi is not a backend qtrain has; use auto");
}

}  // namespace
}  // namespace qtrain::engine::dist
