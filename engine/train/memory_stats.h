// The training device's memory: its size, the limit qtrain puts on the CUDA caching allocator,
// and the peak the step reached: the allocator's peak of allocated bytes on CUDA, or on the CPU
// the peak resident set (VmHWM). The peak is reported in the progress line and in
// metrics.jsonl as peak_memory_bytes.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace qtrain::engine::train {

int64_t peak_memory_bytes(const c10::Device& device);

// Total memory of a CUDA device (the whole card, as the driver reports it).
int64_t device_memory_bytes(const c10::Device& device);

// Makes the caching allocator refuse to hold more than `bytes` on `device` (its memory fraction),
// so a run stays inside gpu_memory_limit even where the card has more.
void limit_device_memory(const c10::Device& device, int64_t bytes);

}  // namespace qtrain::engine::train
