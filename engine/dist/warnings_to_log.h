// libtorch's warnings (TORCH_WARN) as qtrain warnings in the rank-tagged log (rank_log.h),
// without c10's source location and backtrace.
#pragma once

namespace qtrain::engine::dist {

// Installs the handler for the whole process. Call once, after start_rank_log.
void send_torch_warnings_to_log();

}  // namespace qtrain::engine::dist
