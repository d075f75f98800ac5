// Reading a device value on the host, counted. See Note [Host reads].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace qtrain::ops {

// Note [Host reads]
// The host reading a value that the device computed (a scalar through .item(), a tensor copied to
// the CPU) waits until the device has caught up: on CUDA, a stream synchronize that leaves the GPU
// idle while the host prepares the next launches. A training step should read the device only
// where it logs. So every such read in qtrain goes through read_scalar or read_to_host, which
// count it under the name of its site; host_reads() gives the counts, and a test holds the count
// per optimizer step (tests/engine/train/host_reads_test.cpp). On the CPU nothing waits, but the
// step runs the same code and reads the same values, so the counts measured there are the CUDA
// step's. Host data (a batch before it goes to the device) is not a device value and is read
// directly.

void count_host_read(const char* site);

// t's value (t has one element) on the host, counted under `site`.
template <typename T>
T read_scalar(const at::Tensor& t, const char* site) {
  count_host_read(site);
  return t.item<T>();
}

// t on the CPU, counted under `site`.
at::Tensor read_to_host(const at::Tensor& t, const char* site);

// The reads so far in this process, by site.
std::map<std::string, int64_t> host_reads();

}  // namespace qtrain::ops
