// See host_read.h and Note [Host reads] there.
#include "ops/host_read.h"

#include <mutex>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

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

std::map<std::string, int64_t>& lagged() {
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

at::Tensor to_device_async(const at::Tensor& host, const at::Device& device) {
  if (!host.defined() || !device.is_cuda()) return host;
  TORCH_CHECK(host.is_cpu(), "to_device_async: the tensor is on ", host.device(), ", not the host");
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

std::map<std::string, int64_t> host_reads() {
  const std::lock_guard<std::mutex> lock(reads_mutex());
  return reads();
}

struct LaggedRead::Event {
  c10::Event event;
};

LaggedRead::LaggedRead() = default;
LaggedRead::~LaggedRead() = default;

void LaggedRead::start(const at::Tensor& t, const char* site) {
  TORCH_CHECK(!pending(), "LaggedRead::start: the read of ", site_, " is still pending");
  site_ = site;
  if (!t.is_cuda()) {
    copy_ = t.clone();
    return;
  }
  copy_ = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  copy_.copy_(t, /*non_blocking=*/true);
  copied_ = std::make_unique<Event>(Event{c10::Event(t.device().type())});
  const c10::impl::VirtualGuardImpl guard(t.device().type());
  copied_->event.record(guard.getStream(t.device()));
}

at::Tensor LaggedRead::finish() {
  TORCH_CHECK(pending(), "LaggedRead::finish: nothing was started");
  if (copied_) copied_->event.synchronize();
  copied_.reset();
  {
    const std::lock_guard<std::mutex> lock(reads_mutex());
    ++lagged()[site_];
  }
  auto out = std::move(copy_);
  copy_ = at::Tensor();
  return out;
}

std::map<std::string, int64_t> lagged_reads() {
  const std::lock_guard<std::mutex> lock(reads_mutex());
  return lagged();
}

}  // namespace qtrain::ops
