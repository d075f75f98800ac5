// A copy engine without a GPU: "device" buffers are ordinary CPU memory and copies run on a
// worker thread, each after a configurable delay, so that the slot ring's ordering is exercised
// in CI exactly as a CUDA stream would exercise it: a compute that read a slot before its copy
// finished, or a copy that overwrote a slot still being read, shows up as wrong values.
//
// The host thread is the compute queue: compute_wait blocks it until the fence is done. CPU
// compute is synchronous, so compute fences are done when they are taken, unless the engine is
// built with manual_compute_fences; then each stays pending until finish_compute() (a test's
// stand-in for a GPU still running the kernels that read a slot).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/copy_engine.h"

namespace qtrain::offload {

struct SimulatedCopyOptions {
  std::chrono::microseconds copy_delay{0};  // before each copy starts moving bytes
  bool manual_compute_fences = false;
};

class SimulatedCopyEngine final : public CopyEngine {
 public:
  explicit SimulatedCopyEngine(SimulatedCopyOptions options = {});
  ~SimulatedCopyEngine() override;
  SimulatedCopyEngine(const SimulatedCopyEngine&) = delete;
  SimulatedCopyEngine& operator=(const SimulatedCopyEngine&) = delete;

  at::Device device() const override { return at::kCPU; }
  at::Tensor host_buffer(int64_t bytes) override;
  at::Tensor device_buffer(int64_t bytes) override;
  FencePtr copy(const at::Tensor& src, const at::Tensor& dst, const FencePtr& after) override;
  void compute_wait(const FencePtr& fence) override;
  FencePtr compute_fence() override;

  // Completes every compute fence taken so far (manual_compute_fences only).
  void finish_compute();
  // Copies that have finished.
  int64_t copies_done() const;

 private:
  class Flag;
  struct Job {
    at::Tensor src, dst;
    FencePtr after;
    std::shared_ptr<Flag> done;
  };
  void run();

  SimulatedCopyOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  std::vector<std::shared_ptr<Flag>> pending_compute_;
  int64_t copies_done_ = 0;
  bool stop_ = false;
  std::thread worker_;  // last: starts after everything it reads is built
};

}  // namespace qtrain::offload
