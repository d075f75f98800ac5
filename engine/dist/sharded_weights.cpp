// See sharded_weights.h.
#include "engine/dist/sharded_weights.h"

#include <ATen/ATen.h>

namespace qtrain::engine::dist {
namespace {

std::vector<at::Tensor> base_tensors(const model::DecoderLayer& layer) {
  std::vector<at::Tensor> tensors;
  for (const auto* lin : layer.weight_linears()) {
    const auto t = lin->base_tensors();
    tensors.insert(tensors.end(), t.begin(), t.end());
  }
  return tensors;
}

void bind_layer(model::DecoderLayer& layer, const std::vector<at::Tensor>& tensors) {
  size_t next = 0;
  for (auto* lin : layer.weight_linears()) {
    const size_t count = lin->base_tensors().size();
    TORCH_INTERNAL_ASSERT(next + count <= tensors.size());
    lin->rebind_base_tensors(std::vector<at::Tensor>(tensors.begin() + next, tensors.begin() + next + count));
    next += count;
  }
  TORCH_INTERNAL_ASSERT(next == tensors.size());
}

// Meta tensors with the layout's shapes and dtypes: the layer's shape without its bytes.
std::vector<at::Tensor> placeholders(const offload::BlobLayout& layout) {
  return layout.views(at::empty({layout.total_bytes()}, at::TensorOptions(at::kByte).device(at::kMeta)));
}

}  // namespace

ShardedWeights::ShardedWeights(Comm& comm, int64_t prefetch_depth) : comm_(comm), depth_(prefetch_depth) {
  TORCH_CHECK(depth_ >= 1, "offload_prefetch_depth must be at least 1, got ", depth_);
}

void ShardedWeights::shard_layer(int64_t index, model::DecoderLayer& layer) {
  TORCH_CHECK(!model_, "layer ", index, " is sharded after the model was bound");
  TORCH_CHECK(!shards_.count(index), "layer ", index, " is sharded twice");
  at::NoGradGuard no_grad;
  const auto tensors = base_tensors(layer);
  TORCH_CHECK(!tensors.empty(), "layer ", index, " has no base weights to shard");
  Shard s;
  s.layout = offload::BlobLayout::of(tensors);
  const int64_t world = comm_.world_size(), unit = world * offload::kBlobAlignment;
  s.padded_bytes = (s.layout.total_bytes() + unit - 1) / unit * unit;
  const auto blob = at::zeros({s.padded_bytes}, tensors[0].options().dtype(at::kByte));
  s.layout.pack(tensors, blob);
  const int64_t part = s.padded_bytes / world;
  s.bytes = blob.narrow(0, comm_.rank() * part, part).clone();
  // An offloaded layer was loaded into host memory: its shard stays there, pinned when a GPU will
  // read it, and crosses to the device inside the gather.
  if (s.bytes.is_cpu() && at::hasCUDA()) s.bytes = s.bytes.pin_memory();
  slot_bytes_ = std::max(slot_bytes_, s.padded_bytes);
  bind_layer(layer, placeholders(s.layout));  // drops the whole tensors
  shards_.emplace(index, std::move(s));
}

void ShardedWeights::bind_model(model::CausalLM& model) {
  const int64_t n = static_cast<int64_t>(model.layers().size());
  TORCH_CHECK(static_cast<int64_t>(shards_.size()) == n,
              "the model has ",
              n,
              " layers but ",
              shards_.size(),
              " were sharded; load it with LoadOptions::on_layer_loaded set to shard_layer");
  model_ = &model;
  slots_.resize(std::min(n, depth_ + 1));
  for (auto& slot : slots_) slot.buffer = at::empty({slot_bytes_}, at::TensorOptions(at::kByte).device(model.device()));
}

ShardedWeights::Slot& ShardedWeights::slot_for(int64_t layer) {
  for (auto& slot : slots_) {
    if (slot.layer == layer && !slot.acquired) return slot;
  }
  Slot* pick = nullptr;
  for (auto& slot : slots_) {
    if (slot.acquired) continue;
    if (!pick || (slot.layer < 0) > (pick->layer < 0) ||
        ((slot.layer < 0) == (pick->layer < 0) && slot.last_use < pick->last_use)) {
      pick = &slot;
    }
  }
  TORCH_CHECK(pick,
              "layer ",
              layer,
              " cannot be gathered: all ",
              slots_.size(),
              " slots hold acquired layers (a layer acquired without release?)");
  return *pick;
}

void ShardedWeights::acquire(int64_t layer) {
  TORCH_CHECK(model_, "acquire(", layer, ") before bind_model");
  std::lock_guard<std::mutex> lock(mutex_);
  const auto& shard = shards_.at(layer);
  Slot& slot = slot_for(layer);
  if (slot.layer != layer) {
    auto out = slot.buffer.narrow(0, 0, shard.padded_bytes);
    comm_.allgather_into(out, shard.bytes, "gathering the base weights of layer " + std::to_string(layer));
    slot.buffer.unsafeGetTensorImpl()->bump_version();
    slot.layer = layer;
    ++gathers_;
    gathered_bytes_ += shard.padded_bytes;
  }
  slot.acquired = true;
  bind_layer(model_->layers().at(layer), shard.layout.views(slot.buffer));
}

void ShardedWeights::release(int64_t layer) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& slot : slots_) {
    if (slot.layer != layer || !slot.acquired) continue;
    slot.acquired = false;
    slot.last_use = ++clock_;
    bind_layer(model_->layers().at(layer), placeholders(shards_.at(layer).layout));
    return;
  }
  TORCH_CHECK(false, "layer ", layer, " is released but was not acquired");
}

int64_t ShardedWeights::shard_bytes() const {
  int64_t total = 0;
  for (const auto& [layer, s] : shards_) total += s.bytes.numel();
  return total;
}

int64_t ShardedWeights::host_shard_bytes() const {
  TORCH_CHECK(model_, "host_shard_bytes() before bind_model");
  int64_t total = 0;
  for (const auto& [layer, s] : shards_) total += s.bytes.device() != model_->device() ? s.bytes.numel() : 0;
  return total;
}

}  // namespace qtrain::engine::dist
