// Residency for a base model sharded across the ranks of a run (shard_base, axolotl's fsdp): each
// rank keeps 1/world_size of every decoder layer's quantized base weights and all-gathers a layer
// into one of a few device slots before it computes, in forward and again before its recompute in
// backward. See Note [Sharded base].
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/dist/comm.h"
#include "engine/model/causal_lm.h"
#include "engine/schedule/residency.h"
#include "offload/blob_layout.h"

namespace qtrain::engine::dist {

// Note [Sharded base]
// A layer's base tensors (what offload streams: packed 4-bit codes with their absmax and nested
// absmax, int8 CB and SCB, or plain weights) are packed into one blob (offload/blob_layout.h),
// padded to a multiple of world_size * 256 bytes and cut into world_size equal shards; rank r
// keeps bytes [r * s, (r + 1) * s). Cutting bytes rather than tensors makes every shard the same
// size, which c10d's all-gather needs, and the gather puts back the very bytes of the blob, so a
// sharded run computes bit for bit what an unsharded one does. A shard is taken as soon as its
// layer is loaded (LoadOptions::on_layer_loaded), so a rank never holds more than its shards and
// one whole layer. Layers that are also offloaded keep their shards in (pinned) host memory and
// gather from there. Outside acquire/release a layer's base tensors are meta tensors of the right
// shapes: a stray use fails on the device check instead of reading another layer's slot.
//
// The gather is a collective: every rank must acquire the same layers in the same order. The
// scheduler acquires each layer in forward and each checkpointed one in backward, identically on
// every rank (a training step runs gradient_accumulation_steps micro-batches on each rank); a rank
// with no evaluation batch left calls LayerScheduler::skip_eval. Slots are chosen by the same rule
// on every rank (a slot that still holds the layer, else an empty one, else the one released
// longest ago), so a layer found in a slot is skipped by all ranks alike. Every gather bumps its
// slot's version counter: a tensor saved for backward from a slot that has since been refilled
// fails in backward instead of reading the new layer. A sharded layer therefore always needs its
// recompute, like an offloaded one.
//
// Gathers run ahead of the compute like offload's copies: the scheduler announces the pass's
// acquisitions (plan_acquisitions), and up to prefetch_depth layers past the one computing are
// being gathered into free slots while it computes (on Gloo's threads, or NCCL's stream), in the
// same order on every rank. A slot holding a layer the window still wants is not reused.
class ShardedWeights final : public schedule::WeightResidency {
 public:
  // `comm` must outlive this object. Slots: min(layers, prefetch_depth + 1), as offload uses.
  ShardedWeights(Comm& comm, int64_t prefetch_depth);
  // Waits for gathers still in flight (they write into the slots), unless an error is on its way
  // out: then a peer may be gone, and the process ends anyway.
  ~ShardedWeights() override;
  ShardedWeights(const ShardedWeights&) = delete;
  ShardedWeights& operator=(const ShardedWeights&) = delete;

  // For LoadOptions::on_layer_loaded: keeps this rank's shard of layer `index`'s base tensors,
  // where they are (the device, or host memory for a layer loaded there to be offloaded), and
  // frees the rest.
  void shard_layer(int64_t index, model::DecoderLayer& layer);
  // The loaded model, whose layers acquire() binds to the gathered tensors. Every layer must have
  // passed through shard_layer. The model must outlive this object.
  void bind_model(model::CausalLM& model);

  void plan_acquisitions(const std::vector<int64_t>& order) override;
  void acquire(int64_t layer) override;
  void release(int64_t layer) override;
  bool needs_recompute(int64_t) const override { return true; }

  int64_t shard_bytes() const;  // this rank's shards of all layers
  // Of those, the ones kept in host memory while the model computes on a GPU (offloaded layers).
  int64_t host_shard_bytes() const;
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  int64_t gathers() const { return gathers_; }
  int64_t gathered_bytes() const { return gathered_bytes_; }
  // Acquisitions no gather ahead had prepared: the compute waited for a whole gather.
  int64_t unprepared_acquisitions() const { return unprepared_; }

 private:
  struct Shard {
    offload::BlobLayout layout;
    int64_t padded_bytes = 0;  // the blob padded to world_size * 256
    at::Tensor bytes;          // uint8 [padded_bytes / world_size]: this rank's part
  };
  struct Slot {
    at::Tensor buffer;  // uint8 [slot_bytes_]
    int64_t layer = -1;
    bool acquired = false;
    std::optional<Comm::PendingGather> gathering;  // until acquire waits for it
    uint64_t last_use = 0;
  };
  Slot* holding(int64_t layer);
  // A slot to gather `layer` into: an empty one, else the one released longest ago among those
  // holding no layer of the window ahead.
  Slot* free_slot(const std::vector<int64_t>& window);
  void start_gather(Slot& slot, int64_t layer);
  std::vector<int64_t> window() const;
  void gather_ahead();

  Comm& comm_;
  int64_t depth_;
  model::CausalLM* model_ = nullptr;
  std::map<int64_t, Shard> shards_;
  std::vector<Slot> slots_;
  int64_t slot_bytes_ = 0;
  std::vector<int64_t> order_;  // the announced acquisitions
  size_t cursor_ = 0;           // index in order_ of the next expected acquisition
  uint64_t clock_ = 0;
  int64_t unprepared_ = 0;
  int64_t gathers_ = 0;
  int64_t gathered_bytes_ = 0;
  // Forward runs on the caller's thread, a CUDA backward on autograd's device thread.
  std::mutex mutex_;
};

}  // namespace qtrain::engine::dist
