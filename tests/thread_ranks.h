// The ranks of a run as threads of one test process, over Gloo on 127.0.0.1 (a free port per
// call, so that ctest -j is safe).
#pragma once

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/dist/comm.h"
#include "tests/free_port.h"

namespace qtrain::test {

inline engine::dist::DistEnv rank_env(int64_t rank, int64_t world, int port) {
  engine::dist::DistEnv e;
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.local_world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

// Runs body(comm) on `world` threads, one rank each; an exception in a rank fails the test. With
// NCCL, rank r computes on cuda:r.
inline void run_ranks(int64_t world,
                      std::chrono::seconds timeout,
                      const std::function<void(engine::dist::Comm&)>& body,
                      engine::dist::DdpBackend backend = engine::dist::DdpBackend::gloo) {
  const int port = free_port();
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        const at::Device device = backend == engine::dist::DdpBackend::nccl
                                      ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(r))
                                      : at::Device(at::kCPU);
        engine::dist::Comm comm(rank_env(r, world, port), timeout, backend, device);
        body(comm);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace qtrain::test
