// Activation offloading: the input a checkpointed layer keeps for its recompute leaves the
// device for host memory (pinned on a GPU) as soon as the layer's forward has produced the next
// one, and comes back ahead of the recompute, prefetch_depth + 1 inputs in advance (with the one
// restored, the prefetch_depth + 2 inputs the memory plan counts on the device), through the copy
// engine that streams offloaded weights and under its ordering rules (Note [Copy and compute
// ordering] in offload/copy_engine.h). What stays on the device is the last few inputs
// (which backward needs first), the one whose copy out has not finished yet and those fetched
// back early: a few layers' worth instead of all of them. The bytes come back unchanged, so a run
// trains bitwise as it does without offloading.
//
// Note [Offloaded activations and the allocator]
// A tensor on its way out is read by the copy queue, not the compute queue; had it been freed
// at once, the CUDA caching allocator could hand its memory to a kernel while the copy still
// reads it. So each one is held until its copy's fence is done (checked at every stash and
// restore; a stash that would hold more than prefetch_depth + 2 inputs on the device first waits
// for the oldest copy out). A buffer coming
// back is allocated on the compute stream and written by a copy that waits for the compute
// enqueued so far, then read by compute that waits for the copy: the allocator's usual stream
// rule holds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "offload/copy_engine.h"

namespace qtrain::engine::schedule {

class OffloadedActivations {
 public:
  OffloadedActivations(std::shared_ptr<offload::CopyEngine> engine, int64_t prefetch_depth);

  // Forgets the last step's inputs (their host buffers are kept for reuse). Call before a forward.
  void begin_step();
  // Forward: queues the copy of `h` (on the engine's device) to host memory, after the compute
  // that made it; returns the key restore() takes. Inputs are stashed in forward order.
  // `checkpointed_after`: how many checkpointed layers the forward runs after this one. The last
  // prefetch_depth + 1 inputs stay on the device (backward needs them first, so a round trip would
  // only delay it). The device holds at most prefetch_depth + 2 inputs, as the memory plan counts:
  // those that stay, those whose copy out has not finished, and this one; a stash that would hold
  // more first waits for the oldest copy out. So in the middle of the forward up to
  // prefetch_depth + 2 inputs may be leaving at once, and the compute waits only when the copies
  // fall that far behind; at its end one at most is still leaving.
  int64_t stash(const at::Tensor& h, int64_t checkpointed_after);
  // Backward: the stashed input `key` on the device, the compute ordered after its copy back;
  // first queues the copies of the prefetch_depth + 1 inputs stashed before it (the ones backward
  // restores next: with this one, the prefetch_depth + 2 inputs the memory plan counts on the
  // device). Each key is restored once.
  at::Tensor restore(int64_t key);

  // Host bytes the stashed inputs of this step occupy (the pinned memory to plan for).
  int64_t host_bytes() const;
  // Copies moved out and back in this step (a test's check that the inputs did leave).
  int64_t copies_out() const { return copies_out_; }
  int64_t copies_in() const { return copies_in_; }

 private:
  struct Entry {
    at::Tensor host;              // uint8, the stashed bytes
    at::Tensor leaving;           // the device tensor until its copy out is done
    int64_t version = 0;          // leaving's version counter at the stash
    offload::FencePtr out_fence;  // the copy out
    at::Tensor back;              // uint8 on the device once fetched
    offload::FencePtr in_fence;   // the copy back
    std::vector<int64_t> sizes;
    at::ScalarType dtype{};
    bool restored = false;
  };
  // Lets go of the device tensors of inputs before `keep_from` whose copy out has finished.
  void drop_finished_copies_out(int64_t keep_from = INT64_MAX);
  void fetch(Entry& e);

  std::shared_ptr<offload::CopyEngine> engine_;
  int64_t prefetch_depth_;
  std::vector<Entry> entries_;
  std::vector<at::Tensor> spare_host_;  // last step's host buffers, reused by size
  int64_t copies_out_ = 0;
  int64_t copies_in_ = 0;
};

}  // namespace qtrain::engine::schedule
