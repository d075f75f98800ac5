// See offloaded_activations.h.
#include "engine/schedule/offloaded_activations.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "offload/prefetch_depth.h"

namespace qtrain::engine::schedule {

OffloadedActivations::OffloadedActivations(std::shared_ptr<offload::CopyEngine> engine, int64_t prefetch_depth)
    : engine_(std::move(engine)), prefetch_depth_(prefetch_depth) {
  TORCH_CHECK(engine_ != nullptr, "activation offloading needs a copy engine");
  offload::check_prefetch_depth(prefetch_depth_);
}

void OffloadedActivations::begin_step() {
  for (Entry& e : entries_) {
    if (e.out_fence) e.out_fence->synchronize();  // a step abandoned mid-way: its copies still read
    if (e.in_fence) e.in_fence->synchronize();
    if (e.host.defined()) spare_host_.push_back(std::move(e.host));
  }
  entries_.clear();
  copies_out_ = copies_in_ = 0;
}

void OffloadedActivations::drop_finished_copies_out(int64_t keep_from) {
  for (int64_t k = 0; k < std::min<int64_t>(keep_from, static_cast<int64_t>(entries_.size())); ++k) {
    Entry& e = entries_[k];
    if (e.leaving.defined() && e.out_fence && e.out_fence->ready()) e.leaving = at::Tensor();
  }
}

int64_t OffloadedActivations::stash(const at::Tensor& h, int64_t checkpointed_after) {
  TORCH_CHECK(h.device() == engine_->device(),
              "activation offloading stashes tensors on ",
              engine_->device(),
              ", got one on ",
              h.device());
  drop_finished_copies_out();
  // At most prefetch_depth + 2 inputs on the device (see stash's comment): the oldest copies out
  // are waited for until this one fits.
  const auto on_device = [&] {
    return std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.leaving.defined(); });
  };
  while (on_device() + 1 > prefetch_depth_ + 2) {
    const auto oldest = std::find_if(
        entries_.begin(), entries_.end(), [](const Entry& e) { return e.leaving.defined() && e.out_fence; });
    TORCH_INTERNAL_ASSERT(oldest != entries_.end(), "more inputs stay on the device than prefetch_depth + 1");
    oldest->out_fence->synchronize();
    oldest->leaving = at::Tensor();
  }
  Entry e;
  e.leaving = h.contiguous();
  e.version = e.leaving._version();
  e.sizes = h.sizes().vec();
  e.dtype = h.scalar_type();
  if (checkpointed_after <= prefetch_depth_) {
    entries_.push_back(std::move(e));  // stays: no copy, no fence
    return static_cast<int64_t>(entries_.size()) - 1;
  }
  const int64_t bytes = static_cast<int64_t>(e.leaving.nbytes());
  const auto spare =
      std::find_if(spare_host_.begin(), spare_host_.end(), [&](const at::Tensor& t) { return t.numel() == bytes; });
  if (spare != spare_host_.end()) {
    e.host = std::move(*spare);
    spare_host_.erase(spare);
  } else {
    e.host = engine_->host_buffer(bytes);
  }
  // The copy reads `h` once the compute that writes it is done (rule 1 of the Note, mirrored).
  e.out_fence = engine_->copy(e.leaving.reshape({-1}).view(at::kByte), e.host, engine_->compute_fence());
  ++copies_out_;
  entries_.push_back(std::move(e));
  return static_cast<int64_t>(entries_.size()) - 1;
}

void OffloadedActivations::fetch(Entry& e) {
  if (e.back.defined() || e.leaving.defined()) return;  // on its way back, or never left the device
  e.back = engine_->device_buffer(static_cast<int64_t>(e.host.numel()));
  e.in_fence = engine_->copy(e.host, e.back, engine_->compute_fence());
  ++copies_in_;
}

at::Tensor OffloadedActivations::restore(int64_t key) {
  TORCH_CHECK(key >= 0 && key < static_cast<int64_t>(entries_.size()) && !entries_[key].restored,
              "activation offloading: input ",
              key,
              " was not stashed in this step or was restored already");
  // The inputs backward restores next come back now, as many as keep the device at
  // prefetch_depth + 2 inputs with this one (what the memory plan counts). One of them still on
  // the device (its copy out finished late, at the end of the forward) stays there rather than
  // making the round trip: the same bytes, one copy fewer.
  const int64_t ahead = prefetch_depth_ + 1;
  drop_finished_copies_out(key - ahead);
  for (int64_t k = key - 1; k >= 0 && k >= key - ahead; --k) fetch(entries_[k]);
  Entry& e = entries_[key];
  e.restored = true;
  at::Tensor out;
  if (e.leaving.defined()) {
    // It stayed (one of the last inputs), or is still here since its copy out finished late: the
    // device tensor holds the same bytes, unless something wrote into it, which would also have
    // raced with the copy out.
    TORCH_CHECK(e.leaving._version() == e.version,
                "activation offloading: input ",
                key,
                " of this step (the input of its checkpointed layer number ",
                key,
                ", counting checkpointed layers from 0) was written in place after the forward stashed it, so "
                "neither its device "
                "tensor nor its host copy is sure to hold what the forward read; this is a bug in the layer's "
                "code: a checkpointed layer must not modify its input");
    out = std::move(e.leaving);
  } else {
    fetch(e);
    engine_->compute_wait(e.in_fence);
    out = std::move(e.back).view(e.dtype).view(e.sizes);
  }
  return out;
}

int64_t OffloadedActivations::host_bytes() const {
  int64_t total = 0;
  for (const Entry& e : entries_) total += e.host.defined() ? static_cast<int64_t>(e.host.nbytes()) : 0;
  return total;
}

}  // namespace qtrain::engine::schedule
