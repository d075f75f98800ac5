// The training device's memory: its size, the limit qtrain puts on the CUDA caching allocator,
// and the peak the steps reached: on CUDA the allocator's peak of allocated bytes since the last
// reset_peak_memory (the trainer resets it once the model is loaded and after each logged step,
// so loading and the copy-bandwidth probe never count), on the CPU the process's peak resident
// set (VmHWM), which cannot be reset. The peak is reported in the progress line and in
// metrics.jsonl as peak_memory_bytes.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace qtrain::engine::train {

int64_t peak_memory_bytes(const c10::Device& device);

// Starts a new peak on a CUDA device: the next peak_memory_bytes counts from what is allocated
// now. A no-op on the CPU.
void reset_peak_memory(const c10::Device& device);

// Total memory of a CUDA device (the whole card, as the driver reports it).
int64_t device_memory_bytes(const c10::Device& device);

// Makes the caching allocator refuse to hold more than `bytes` on `device` (its memory fraction),
// so a run stays inside gpu_memory_limit even where the card has more.
void limit_device_memory(const c10::Device& device, int64_t bytes);

}  // namespace qtrain::engine::train
