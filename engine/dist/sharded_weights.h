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
// sharded run computes bit for bit what an unsharded one does.
//
// Each layer is read from the checkpoint (and quantized) by one rank only, its reader (layer i:
// rank i mod world_size); the others build it with placeholders of the same shapes
// (LoadOptions::reads_layer_weights) and receive their shard from the reader by a scatter, with
// a description (the blob's size, a signature of its layout and the 4-bit nested offsets, which
// live outside the tensors) by a broadcast. Both are started as the layer loads and run while the
// ranks go on loading their own next layers, so loading takes about 1/N of the time; bind_model
// waits for them, checks the description against the rank's own placeholders and fills in the
// offsets. A rank holds its shards, the layer it is loading and the blob of the last layer it
// read until that is sent (before it packs layer i it waits for layer i - world_size's transfers,
// which also keeps every rank within world_size layers of the others). Layers that are also
// offloaded keep their shards in (pinned) host memory and gather from there. Outside
// acquire/release a layer's base tensors are meta tensors of the right shapes: a stray use fails
// on the device check instead of reading another layer's slot.
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
  // `comm` must outlive this object. Slots: offload::slots_for(layers, prefetch_depth), as offload uses.
  ShardedWeights(Comm& comm, int64_t prefetch_depth);
  // Waits for gathers still in flight (they write into the slots), unless an error is on its way
  // out: then a peer may be gone, and the process ends anyway.
  ~ShardedWeights() override;
  ShardedWeights(const ShardedWeights&) = delete;
  ShardedWeights& operator=(const ShardedWeights&) = delete;

  // Sets `options` to load only the layers this rank reads and to keep this rank's shard of each
  // layer as it loads (reads_layer_weights, on_layer_loaded); host_layers and device must be set
  // already. Then CausalLM::load, then bind_model.
  void prepare_load(model::LoadOptions& options);
  // The rank that reads layer `layer` from the checkpoint and sends the others their shards.
  int64_t reader_of(int64_t layer) const { return layer % comm_.world_size(); }
  // The loaded model, whose layers acquire() binds to the gathered tensors: waits for the shards
  // still arriving and checks them (See Note [Sharded base]). Every layer must have been loaded
  // with prepare_load's options. The model must outlive this object.
  void bind_model(model::CausalLM& model);

  void plan_acquisitions(const std::vector<int64_t>& order) override;
  void acquire(int64_t layer) override;
  void release(int64_t layer) override;
  bool needs_recompute(int64_t) const override { return true; }

  int64_t shard_bytes() const;  // this rank's shards of all layers
  int64_t layers_read() const;  // layers this rank read from the checkpoint (it is their reader)
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
  // A layer's shard and description on their way from its reader.
  struct Incoming {
    int64_t layer = -1;
    at::Tensor description;  // int64: blob bytes, layout signature, each nested offset's bits
    int64_t expected_bytes = 0, expected_signature = 0;
    Comm::Pending description_sent, shard_sent;
  };
  struct Slot {
    at::Tensor buffer;  // uint8 [slot_bytes_]
    int64_t layer = -1;
    bool acquired = false;
    std::optional<Comm::Pending> gathering;  // until acquire waits for it
    uint64_t last_use = 0;
  };
  void shard_layer(int64_t index, model::DecoderLayer& layer);
  void wait_incoming(int64_t up_to_layer);
  Slot* holding(int64_t layer);
  // A slot to gather `layer` into: an empty one, else the one released longest ago among those
  // holding no layer of the window ahead.
  Slot* free_slot(const std::vector<int64_t>& window);
  void start_gather(Slot& slot, int64_t layer);
  std::vector<int64_t> window() const;
  void gather_ahead();

  Comm& comm_;
  int64_t depth_;
  at::Device device_ = at::kCPU;      // the model's (LoadOptions::device)
  std::vector<int64_t> host_layers_;  // shards kept in host memory (LoadOptions::host_layers)
  std::vector<Incoming> incoming_;
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
