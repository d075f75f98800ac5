// A small ring of device slots, each big enough for the largest streamed layer, through which
// layers stream from their source (slot_source.h: offload's host store, or a sharded base's
// gather): the one slot pool of qtrain. Every fill of a slot gets a new generation; a ticket names
// the slot, layer and generation a prefetch produced, and acquiring a ticket whose slot has been
// refilled since is an error (the failure of bitsandbytes issue #2034, where reused weight
// buffers gave silently wrong gradients). Copies are ordered against the compute by fences, see
// Note [Copy and compute ordering] in copy_engine.h.
//
// Each fill also bumps the slot's version counter, which its views share: a tensor autograd
// saved from a slot (a layer that was offloaded but not recomputed) fails loudly in backward
// once the slot holds another layer, instead of reading that layer's weights.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "offload/copy_engine.h"
#include "offload/slot_source.h"

namespace qtrain::offload {

struct SlotTicket {
  int64_t slot = -1;
  int64_t layer = -1;
  uint64_t generation = 0;
};

// A slot in use by the compute: the layer's tensors as views into the slot.
struct SlotLease {
  SlotTicket ticket;
  std::vector<at::Tensor> tensors;
};

struct SlotRingStats {
  int64_t copies = 0;        // fills: blobs copied host -> device, or layers gathered
  int64_t copied_bytes = 0;  // their bytes (fill_bytes)
  int64_t hits = 0;          // prefetches that found the layer already in a slot
};

class SlotRing {
 public:
  // `num_slots` buffers of the source's largest fill. The source must outlive the ring.
  SlotRing(SlotSource& source, int64_t num_slots);
  // Waits for fills still in flight: on a GPU they write into the slots through raw pointers,
  // which the allocator must not hand out again before they land.
  ~SlotRing();
  SlotRing(const SlotRing&) = delete;
  SlotRing& operator=(const SlotRing&) = delete;

  // Queues the copy of `layer` into a slot that is not acquired, unless a slot already holds it
  // (then that slot is reserved for it, with no copy). Prefers an empty slot, then the one
  // released longest ago, then the oldest reserved one (whose ticket goes stale). Errors when
  // every slot is acquired.
  SlotTicket prefetch(int64_t layer);
  // Whether `ticket`'s slot still holds its layer and generation.
  bool holds(const SlotTicket& ticket) const;
  // Whether some slot holds `layer` (a prefetch of it would copy nothing).
  bool has(int64_t layer) const;
  // Gives up a prefetch that will not be acquired: its slot may be reused (it keeps the layer
  // until then). A no-op for a stale ticket.
  void cancel(const SlotTicket& ticket);
  // Slots neither acquired nor reserved by a prefetch that has not been acquired yet.
  int64_t unreserved_slots() const;

  // The compute may read the lease's tensors from now on (work it enqueues waits for the copy).
  // Errors when the slot was refilled since the prefetch, or is already acquired.
  SlotLease acquire(const SlotTicket& ticket);
  // The compute is done with the slot once the work it has enqueued so far has run. Errors when
  // the slot no longer holds the lease's layer.
  void release(const SlotLease& lease);

  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  int64_t slot_bytes() const { return slot_bytes_; }
  const SlotRingStats& stats() const { return stats_; }

 private:
  enum class State { empty, reserved, acquired, released };
  struct Slot {
    at::Tensor buffer;  // uint8 [slot_bytes] on the device
    State state = State::empty;
    int64_t layer = -1;
    uint64_t generation = 0;
    FencePtr copy_done;  // the copy that filled it
    bool acquired_since_fill = false;
    FencePtr compute_done;  // the compute that last read it
    uint64_t last_use = 0;  // when it was last reserved or released, for eviction order
  };
  void check_holds(const SlotTicket& ticket, const char* what) const;

  SlotSource& source_;
  int64_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  uint64_t generations_ = 0;
  uint64_t clock_ = 0;
  SlotRingStats stats_;
};

}  // namespace qtrain::offload
