// See host_read.h and Note [Host reads] there.
#include "ops/host_read.h"

#include <mutex>

namespace qtrain::ops {
namespace {

std::mutex& reads_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, int64_t>& reads() {
  static std::map<std::string, int64_t> counts;
  return counts;
}

}  // namespace

void count_host_read(const char* site) {
  const std::lock_guard<std::mutex> lock(reads_mutex());
  ++reads()[site];
}

at::Tensor read_to_host(const at::Tensor& t, const char* site) {
  count_host_read(site);
  return t.cpu();
}

std::map<std::string, int64_t> host_reads() {
  const std::lock_guard<std::mutex> lock(reads_mutex());
  return reads();
}

}  // namespace qtrain::ops
