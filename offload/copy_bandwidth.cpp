// See copy_bandwidth.h.
#include "offload/copy_bandwidth.h"

#include <chrono>

#include <ATen/ATen.h>

namespace qtrain::offload {

double measure_copy_bandwidth(CopyEngine& engine, int64_t bytes, int repeats) {
  TORCH_CHECK(bytes > 0 && repeats > 0, "measure_copy_bandwidth needs bytes > 0 and repeats > 0");
  auto src = engine.host_buffer(bytes);
  src.fill_(1);  // touch every page, so the first copy does not pay for faulting them in
  auto dst = engine.device_buffer(bytes);
  engine.copy(src, dst, nullptr)->synchronize();
  const auto start = std::chrono::steady_clock::now();
  FencePtr last;
  for (int i = 0; i < repeats; ++i) last = engine.copy(src, dst, nullptr);
  last->synchronize();  // copies run in order on one queue
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(bytes) * repeats / std::max(s, 1e-9);
}

}  // namespace qtrain::offload
