// See simulated_copy_engine.h.
#include "offload/simulated_copy_engine.h"

#include <cstring>

#include <ATen/ATen.h>

namespace qtrain::offload {

// A fence that some thread sets once.
class SimulatedCopyEngine::Flag final : public Fence {
 public:
  bool ready() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return set_;
  }
  void synchronize() const override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return set_; });
  }
  void set() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      set_ = true;
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool set_ = false;
};

SimulatedCopyEngine::SimulatedCopyEngine(SimulatedCopyOptions options)
    : options_(options), worker_([this] { run(); }) {}

SimulatedCopyEngine::~SimulatedCopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    // A copy still waiting on a compute fence would wait forever: nothing computes any more.
    for (auto& f : pending_compute_) f->set();
  }
  wake_.notify_all();
  worker_.join();
}

at::Tensor SimulatedCopyEngine::host_buffer(int64_t bytes) {
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
}

at::Tensor SimulatedCopyEngine::device_buffer(int64_t bytes) {
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
}

FencePtr SimulatedCopyEngine::copy(const at::Tensor& src, const at::Tensor& dst, const FencePtr& after) {
  TORCH_CHECK(src.nbytes() == dst.nbytes(), "copy of ", src.nbytes(), " bytes into a buffer of ", dst.nbytes());
  TORCH_CHECK(src.is_contiguous() && dst.is_contiguous(), "simulated copies need contiguous buffers");
  auto done = std::make_shared<Flag>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(Job{src, dst, after, done});
  }
  wake_.notify_all();
  return done;
}

void SimulatedCopyEngine::compute_wait(const FencePtr& fence) {
  if (fence) fence->synchronize();
}

FencePtr SimulatedCopyEngine::compute_fence() {
  auto f = std::make_shared<Flag>();
  if (!options_.manual_compute_fences) {
    f->set();
    return f;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pending_compute_.push_back(f);
  return f;
}

void SimulatedCopyEngine::finish_compute() {
  std::vector<std::shared_ptr<Flag>> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(pending_compute_);
  }
  for (auto& f : done) f->set();
}

int64_t SimulatedCopyEngine::copies_done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return copies_done_;
}

void SimulatedCopyEngine::run() {
  // Copies run one at a time and in order, as on one CUDA stream.
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (job.after) job.after->synchronize();
    if (options_.copy_delay.count() > 0) std::this_thread::sleep_for(options_.copy_delay);
    std::memcpy(job.dst.data_ptr(), job.src.data_ptr(), job.src.nbytes());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++copies_done_;
    }
    job.done->set();
  }
}

}  // namespace qtrain::offload
