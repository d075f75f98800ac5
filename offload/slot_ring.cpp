// See slot_ring.h.
#include "offload/slot_ring.h"

#include <ATen/ATen.h>

namespace qtrain::offload {

SlotRing::SlotRing(SlotSource& source, int64_t num_slots) : source_(source), slot_bytes_(source.max_fill_bytes()) {
  TORCH_CHECK(num_slots >= 1, "a slot ring needs at least one slot, got ", num_slots);
  slots_.resize(num_slots);
  for (auto& s : slots_) s.buffer = source_.device_buffer(slot_bytes_);
  // The allocator may hand out memory that kernels already enqueued on the compute stream still
  // read: it is free in the compute stream's order, not in the copy stream's. The first copy into
  // each slot therefore waits for the compute enqueued so far, like every later refill.
  const FencePtr allocated = source_.compute_fence();
  for (auto& s : slots_) s.compute_done = allocated;
}

SlotRing::~SlotRing() {
  for (const auto& s : slots_) {
    try {
      if (s.copy_done) s.copy_done->synchronize();
    } catch (...) {
      // A failed fill was reported to the compute that waited for it, or the run is ending.
    }
  }
}

SlotTicket SlotRing::prefetch(int64_t layer) {
  for (int64_t i = 0; i < num_slots(); ++i) {
    Slot& s = slots_[i];
    if (s.layer != layer || s.state == State::empty) continue;
    if (s.state == State::released) {
      s.state = State::reserved;
      s.last_use = ++clock_;
    }
    ++stats_.hits;
    return {i, layer, s.generation};
  }
  // Eviction order: empty, then released longest ago, then reserved longest ago.
  auto rank = [](State st) { return st == State::empty ? 0 : st == State::released ? 1 : 2; };
  int64_t victim = -1;
  for (int64_t i = 0; i < num_slots(); ++i) {
    const Slot& s = slots_[i];
    if (s.state == State::acquired) continue;
    if (victim < 0 || rank(s.state) < rank(slots_[victim].state) ||
        (rank(s.state) == rank(slots_[victim].state) && s.last_use < slots_[victim].last_use)) {
      victim = i;
    }
  }
  TORCH_CHECK(victim >= 0,
              "no free device slot for layer ",
              layer,
              ": all ",
              num_slots(),
              " slots are in use by the compute; every acquired layer must be released first");
  Slot& s = slots_[victim];
  // A source need not order two fills of one slot (a gather runs on whichever of Gloo's threads
  // is free). A fill the compute has waited for is ordered before compute_done; one that was
  // never acquired (a prefetch given up) is waited for here.
  if (s.copy_done && !s.acquired_since_fill) s.copy_done->synchronize();
  s.acquired_since_fill = false;
  const int64_t bytes = source_.fill_bytes(layer);
  // A tensor autograd saved from this slot must notice that its contents change.
  s.buffer.unsafeGetTensorImpl()->bump_version();
  s.copy_done = source_.fill(layer, s.buffer.narrow(0, 0, bytes), s.compute_done);
  s.state = State::reserved;
  s.layer = layer;
  s.generation = ++generations_;
  s.last_use = ++clock_;
  ++stats_.copies;
  stats_.copied_bytes += bytes;
  return {victim, layer, s.generation};
}

bool SlotRing::holds(const SlotTicket& t) const {
  return t.slot >= 0 && t.slot < num_slots() && slots_[t.slot].layer == t.layer &&
         slots_[t.slot].generation == t.generation && slots_[t.slot].state != State::empty;
}

bool SlotRing::has(int64_t layer) const {
  for (const auto& s : slots_) {
    if (s.layer == layer && s.state != State::empty) return true;
  }
  return false;
}

void SlotRing::cancel(const SlotTicket& t) {
  if (!holds(t) || slots_[t.slot].state != State::reserved) return;
  slots_[t.slot].state = State::released;
}

int64_t SlotRing::unreserved_slots() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.state == State::empty || s.state == State::released;
  return n;
}

void SlotRing::check_holds(const SlotTicket& t, const char* what) const {
  TORCH_CHECK(t.slot >= 0 && t.slot < num_slots(), what, " layer ", t.layer, ": no slot ", t.slot);
  const Slot& s = slots_[t.slot];
  TORCH_CHECK(holds(t),
              "stale device slot: ",
              what,
              " layer ",
              t.layer,
              " (generation ",
              t.generation,
              ") from slot ",
              t.slot,
              ", which now holds layer ",
              s.layer,
              " (generation ",
              s.generation,
              "). The slot was refilled before the compute used it; reading it would give another "
              "layer's weights. This is a scheduling bug: prefetch no further ahead than there are slots");
}

SlotLease SlotRing::acquire(const SlotTicket& t) {
  check_holds(t, "acquiring");
  Slot& s = slots_[t.slot];
  TORCH_CHECK(s.state != State::acquired,
              "layer ",
              t.layer,
              " is already acquired in slot ",
              t.slot,
              "; release it before acquiring it again");
  source_.compute_wait(s.copy_done);
  s.state = State::acquired;
  s.acquired_since_fill = true;
  return {t, source_.layout(t.layer).views(s.buffer)};
}

void SlotRing::release(const SlotLease& lease) {
  const SlotTicket& t = lease.ticket;
  check_holds(t, "releasing");
  Slot& s = slots_[t.slot];
  TORCH_CHECK(s.state == State::acquired, "layer ", t.layer, " is released but was not acquired");
  s.compute_done = source_.compute_fence();
  s.state = State::released;
  s.last_use = ++clock_;
}

}  // namespace qtrain::offload
