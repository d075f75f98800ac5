// The copy queue that moves layer blobs from host memory into device slots, and the fences that
// order those copies against the compute. On a GPU it is a CUDA stream of its own with events
// (copy_engine_cuda.cpp); in CI it is a worker thread with a configurable delay that stands in
// for the copy engine (simulated_copy_engine.h), so that ordering, slot reuse and stale-slot
// detection are tested without a GPU.
//
// Note [Copy and compute ordering]
// Two rules keep a slot's contents right (DESIGN invariant on device slots):
//   1. the compute reads a slot only after the copy into it has finished: acquire makes the
//      compute queue wait for the copy's fence (compute_wait);
//   2. a copy overwrites a slot only after the compute that read it has finished: release takes
//      a fence of the compute enqueued so far (compute_fence), and the next copy into that slot
//      starts after it (copy's `after`).
// On a GPU neither wait blocks the host: both are stream-to-stream waits on events.
#pragma once

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace qtrain::offload {

// Completion of some queued work: a copy, or the compute enqueued up to some point.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual bool ready() const = 0;
  // Blocks the host until the work is done.
  virtual void synchronize() const = 0;
};
using FencePtr = std::shared_ptr<const Fence>;

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // The device slots live on.
  virtual at::Device device() const = 0;
  // uint8 [bytes] on the host, in memory this engine copies from at full speed (pinned on a GPU).
  virtual at::Tensor host_buffer(int64_t bytes) = 0;
  // uint8 [bytes] on device().
  virtual at::Tensor device_buffer(int64_t bytes) = 0;
  // Queues a copy of `src` into `dst` (uint8, same size) that starts once `after` is done (null:
  // at once), and returns the copy's fence: host to device (layer blobs, offloaded activations
  // coming back), or device to host (activations leaving).
  virtual FencePtr copy(const at::Tensor& src, const at::Tensor& dst, const FencePtr& after) = 0;
  // Work the compute queue gets from now on waits for `fence`.
  virtual void compute_wait(const FencePtr& fence) = 0;
  // A fence that is done once everything the compute queue holds now has run.
  virtual FencePtr compute_fence() = 0;
};

// Copies on a CUDA stream of its own, into buffers on `device`, from pinned host memory. Errors
// when qtrain was built without CUDA kernels or no such device exists.
std::shared_ptr<CopyEngine> make_cuda_copy_engine(const at::Device& device);

}  // namespace qtrain::offload
