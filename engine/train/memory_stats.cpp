// See memory_stats.h.
#include "engine/train/memory_stats.h"

#include <fstream>
#include <string>

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

}  // namespace qtrain::engine::train
