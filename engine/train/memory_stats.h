// Peak memory of the process on the training device: the CUDA caching allocator's peak of
// allocated bytes, or on the CPU the peak resident set (VmHWM). Reported in the progress line and
// in metrics.jsonl as peak_memory_bytes.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace qtrain::engine::train {

int64_t peak_memory_bytes(const c10::Device& device);

}  // namespace qtrain::engine::train
