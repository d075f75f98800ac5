// This process's resident memory from /proc/self/status, for the benchmarks that compare peak
// memory with the reference stack: the resident set now (VmRSS), its peak (VmHWM), and resetting
// that peak to the current size, so that a step's own peak can be read.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace qtrain::bench {

// A "kB" field of /proc/self/status ("VmRSS", "VmHWM"), in KiB; -1 when absent.
inline int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// VmHWM becomes VmRSS (Linux: writing 5 to clear_refs).
inline void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

}  // namespace qtrain::bench
