// The CPU tensor memory a piece of code allocates at its peak, counted exactly: while a
// TensorPeak is installed, libtorch's CPU allocator reports every tensor allocation and free to
// it (the hook torch's profiler uses for profile_memory). Only tensor storage counts, not
// malloc's headers or autograd's nodes, so the figures compare with the memory estimate's byte
// counts one for one. Frees of tensors allocated before it was installed are not reported (the
// allocator knows their size only while profiling; it logs a warning for the first such free).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

namespace qtrain::test {

class TensorPeak : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t bytes, size_t, size_t, c10::Device device) override {
    if (!device.is_cpu()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }
  bool memoryProfilingEnabled() const override { return true; }

  // Bytes allocated since installation and still live, and the most there were since the last
  // reset_peak (or installation).
  int64_t current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  int64_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

 private:
  mutable std::mutex mutex_;
  int64_t current_ = 0, peak_ = 0;
};

// Installs a TensorPeak for the current thread (and the threads autograd and at::parallel_for
// run its work on) for the guard's lifetime.
class TensorPeakGuard {
 public:
  TensorPeakGuard() : peak_(std::make_shared<TensorPeak>()), guard_(c10::DebugInfoKind::PROFILER_STATE, peak_) {}
  TensorPeak& operator*() const { return *peak_; }
  TensorPeak* operator->() const { return peak_.get(); }

 private:
  std::shared_ptr<TensorPeak> peak_;
  c10::DebugInfoGuard guard_;
};

}  // namespace qtrain::test
