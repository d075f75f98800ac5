// See memory_stats.h.
#include "engine/train/memory_stats.h"

#include <algorithm>
#include <fstream>
#include <string>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace qtrain::engine::train {

int64_t peak_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
    // Index 0 is the aggregate over pool types (named differently across torch versions).
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
  }
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

int64_t device_memory_bytes(const c10::Device& device) {
  TORCH_CHECK(device.is_cuda(), "device memory is asked of ", device, ", which is not a CUDA device");
  return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
}

void limit_device_memory(const c10::Device& device, int64_t bytes) {
  const int64_t total = device_memory_bytes(device);
  const double fraction = std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
}

}  // namespace qtrain::engine::train
