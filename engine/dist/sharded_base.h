// A base model sharded across the ranks of a run (shard_base, axolotl's fsdp): each rank keeps
// 1/world_size of every decoder layer's quantized base weights, and a layer is all-gathered into
// a device slot before it computes, in forward and again before its recompute in backward: the
// slot source of streamed weights (engine/schedule/streamed_weights.h) for such a run. See Note
// [Sharded base].
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/dist/comm.h"
#include "engine/model/causal_lm.h"
#include "engine/schedule/residency_plan.h"
#include "offload/blob_layout.h"
#include "offload/slot_source.h"

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
// on every rank (offload/slot_ring.h: a slot that still holds the layer, else an empty one, else
// the one released longest ago), so a layer found in a slot is skipped by all ranks alike. Every gather bumps its
// slot's version counter: a tensor saved for backward from a slot that has since been refilled
// fails in backward instead of reading the new layer. A sharded layer therefore always needs its
// recompute, like an offloaded one.
//
// Gathers run ahead of the compute like offload's copies, through the same slot ring and
// prefetch window (streamed_weights.h): up to prefetch_depth layers past the one computing are
// being gathered into free slots while it computes (on Gloo's threads, or NCCL's stream), in the
// same order on every rank. A slot holding a layer the window still wants is not reused.
class ShardedBase final : public offload::SlotSource {
 public:
  // `comm` must outlive this object; `plan` shards the base (its host layers keep their slices in
  // host memory).
  ShardedBase(Comm& comm, const schedule::ResidencyPlan& plan);
  // Waits for the transfers of loading still in flight, unless an error is on its way out: then a
  // peer may be gone, and the process ends anyway.
  ~ShardedBase() override;
  ShardedBase(const ShardedBase&) = delete;
  ShardedBase& operator=(const ShardedBase&) = delete;

  // Sets `options` to load only the layers this rank reads and to keep this rank's shard of each
  // layer as it loads (reads_layer_weights, on_layer_loaded), in host memory for the plan's host
  // layers; `options.device` must be set already. Then CausalLM::load, then bind_model.
  void prepare_load(model::LoadOptions& options);
  // The rank that reads layer `layer` from the checkpoint and sends the others their shards.
  int64_t reader_of(int64_t layer) const { return layer % comm_.world_size(); }
  // The loaded model: waits for the shards still arriving and checks them (See Note [Sharded
  // base]). Every layer must have been loaded with prepare_load's options. Then a StreamedWeights
  // over this source makes the layers computable.
  void bind_model(model::CausalLM& model);

  int64_t shard_bytes() const;  // this rank's shards of all layers
  int64_t layers_read() const;  // layers this rank read from the checkpoint (it is their reader)
  // Of those, the ones kept in host memory while the model computes on a GPU (offloaded layers).
  int64_t host_shard_bytes() const;

  // SlotSource: a fill is an all-gather of the layer's shards (padded to world_size * 256 bytes),
  // a collective that every rank makes in the same order; a layer rests as meta placeholders.
  at::Tensor device_buffer(int64_t bytes) override;
  const offload::BlobLayout& layout(int64_t layer) const override { return shards_.at(layer).layout; }
  int64_t fill_bytes(int64_t layer) const override { return shards_.at(layer).padded_bytes; }
  int64_t max_fill_bytes() const override;
  offload::FencePtr fill(int64_t layer, const at::Tensor& dst, const offload::FencePtr& after) override;
  void compute_wait(const offload::FencePtr& fence) override;
  // None: NCCL starts a collective after the work the current stream holds, and on the CPU that
  // work has run before the host starts the next gather.
  offload::FencePtr compute_fence() override { return nullptr; }
  std::vector<at::Tensor> resting_tensors(int64_t layer) const override;
  int64_t held_bytes() const override { return shard_bytes(); }

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
  void shard_layer(int64_t index, model::DecoderLayer& layer);
  void wait_incoming(int64_t up_to_layer);

  Comm& comm_;
  schedule::ResidencyPlan plan_;
  at::Device device_ = at::kCPU;  // the model's (LoadOptions::device)
  std::vector<Incoming> incoming_;
  bool bound_ = false;
  std::map<int64_t, Shard> shards_;
};

}  // namespace qtrain::engine::dist
