// A CUDA run's training steps checked for host synchronizations by c10's sync-debug mode.
#pragma once

#include <c10/core/Device.h>

namespace qtrain::engine::train {

// Note [Sync check]
// With QTRAIN_SYNC_CHECK=error (or warn) in the environment, a run on CUDA takes its training
// steps under c10's sync-debug mode (torch.cuda.set_sync_debug_mode in Python), from its second
// step on (the first fills caches: pinned buffers, the 8-bit quantizer's table, cuBLAS's
// workspace) and outside the steps that log, evaluate or save, which read the device on purpose.
// A host synchronization there (an .item(), a copy to or from pageable memory, a stream or device
// synchronize) raises torch's "called a synchronizing CUDA operation" error at the operation (or
// warns). Waiting for an event, as the lagged reads do (Note [Lagged reads]), is not one. The GPU
// tests run a training step so (TrainStepCuda.*), so that a new sync in the step fails them; runs
// without the variable are not touched. Other values and other devices: off. The mode is the
// process's (c10's global), and a MoE model's rows per expert are a read the step still makes, so
// its runs fail the check at their first sparse layer.
class SyncCheck {
 public:
  explicit SyncCheck(const c10::Device& device);
  ~SyncCheck();
  SyncCheck(const SyncCheck&) = delete;
  SyncCheck& operator=(const SyncCheck&) = delete;

  // Whether the check is on for what runs next.
  void set_active(bool active);

 private:
  int mode_ = 0;      // c10::cuda::SyncDebugMode while active; 0: the check is off for this run
  int previous_ = 0;  // the process's mode before, put back while inactive
};

}  // namespace qtrain::engine::train
