// See sync_check.h.
#include "engine/train/sync_check.h"

#include <cstdlib>
#include <string_view>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

namespace qtrain::engine::train {

SyncCheck::SyncCheck(const c10::Device& device) {
  const char* value = std::getenv("QTRAIN_SYNC_CHECK");
  if (!device.is_cuda() || value == nullptr) return;
  const std::string_view v(value);
  TORCH_CHECK(v == "error" || v == "warn" || v.empty() || v == "0",
              "QTRAIN_SYNC_CHECK is '",
              v,
              "'; it must be error, warn, or unset (Note [Sync check])");
  if (v == "error") mode_ = static_cast<int>(c10::cuda::SyncDebugMode::L_ERROR);
  if (v == "warn") mode_ = static_cast<int>(c10::cuda::SyncDebugMode::L_WARN);
  previous_ = static_cast<int>(c10::cuda::warning_state().get_sync_debug_mode());
}

SyncCheck::~SyncCheck() {
  set_active(false);
}

void SyncCheck::set_active(bool active) {
  if (mode_ == 0) return;
  c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(active ? mode_ : previous_));
}

}  // namespace qtrain::engine::train
