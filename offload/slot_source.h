// What fills the device slots that streamed layers pass through (slot_ring.h): a host store's
// blobs, copied by the copy engine (host_store.h), or a sharded base's slices, gathered from
// every rank (engine/dist/sharded_base.h). Either way a layer arrives as the bytes of one blob
// whose layout gives its tensors, and the ordering rules of Note [Copy and compute ordering]
// (copy_engine.h) hold through the fences a source hands out.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "offload/blob_layout.h"
#include "offload/copy_engine.h"

namespace qtrain::offload {

class SlotSource {
 public:
  virtual ~SlotSource() = default;
  // uint8 [bytes] on the device the slots live on.
  virtual at::Tensor device_buffer(int64_t bytes) = 0;
  virtual const BlobLayout& layout(int64_t layer) const = 0;
  // The bytes a fill of `layer` writes (its blob, padded where the source needs it).
  virtual int64_t fill_bytes(int64_t layer) const = 0;
  // The largest fill_bytes of the layers it holds: what one slot must hold.
  virtual int64_t max_fill_bytes() const = 0;
  // Queues writing `layer`'s bytes into `dst` (uint8 [fill_bytes(layer)] on the slots' device),
  // to start once `after` is done (null: at once); returns the fill's fence.
  virtual FencePtr fill(int64_t layer, const at::Tensor& dst, const FencePtr& after) = 0;
  // Work the compute queue gets from now on waits for `fence`.
  virtual void compute_wait(const FencePtr& fence) = 0;
  // A fence that is done once everything the compute queue holds now has run; null where a fill
  // is ordered after the compute enqueued before it without one.
  virtual FencePtr compute_fence() = 0;
  // The layer's tensors while no slot holds it for the compute: its host copy, or placeholders
  // of its shapes that hold no bytes.
  virtual std::vector<at::Tensor> resting_tensors(int64_t layer) const = 0;
  // What the source keeps of all its layers: the host store, or this rank's slices.
  virtual int64_t held_bytes() const = 0;
};

}  // namespace qtrain::offload
