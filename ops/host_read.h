// Reading a device value on the host, counted. See Note [Host reads].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
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

// `host` (a CPU tensor) on `device`, without making the host wait: on CUDA through pinned memory
// and a non-blocking copy, ordered on the current stream before whatever uses it. (A copy from
// pageable memory is a host synchronization on CUDA.) On the CPU, `host` itself.
at::Tensor to_device_async(const at::Tensor& host, const at::Device& device);

// Note [Lagged reads]
// Some values the host needs one step later rather than now: whether the step's update was applied
// (it is decided on the device, Note [Steps decided on the device] in engine/train/trainer.cpp) and
// whether a rank was asked to stop. start() queues their copy into pinned host memory without
// blocking, with an event behind it; finish(), called at the next step after that step's forward
// and backward are queued, waits for the event: for the end of the previous step only, while the
// device has a whole step of work queued, so the device does not idle as it does when the host
// reads a value it has just asked for. lagged_reads() counts them by site, apart from host_reads().
class LaggedRead {
 public:
  LaggedRead();
  ~LaggedRead();
  LaggedRead(const LaggedRead&) = delete;
  LaggedRead& operator=(const LaggedRead&) = delete;

  // Starts copying t to the host; counted under `site` when finished. Nothing may be pending.
  void start(const at::Tensor& t, const char* site);
  bool pending() const { return copy_.defined(); }
  // The value started last, on the CPU, once its copy is done; nothing is pending after.
  at::Tensor finish();

 private:
  struct Event;
  at::Tensor copy_;
  const char* site_ = "";
  std::unique_ptr<Event> copied_;  // CUDA: recorded after the copy
};

// The lagged reads finished so far in this process, by site.
std::map<std::string, int64_t> lagged_reads();

}  // namespace qtrain::ops
