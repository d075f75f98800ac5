// See sharded_weights.h.
#include "engine/dist/sharded_weights.h"

#include <exception>

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

ShardedWeights::~ShardedWeights() {
  if (std::uncaught_exceptions() > 0) return;
  for (auto& slot : slots_) {
    if (!slot.gathering) continue;
    try {
      comm_.wait(*slot.gathering);
    } catch (...) {
      // A failed gather was reported by the collective that came after it; nothing to add.
    }
  }
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

ShardedWeights::Slot* ShardedWeights::holding(int64_t layer) {
  for (auto& slot : slots_) {
    if (slot.layer == layer) return &slot;
  }
  return nullptr;
}

ShardedWeights::Slot* ShardedWeights::free_slot(const std::vector<int64_t>& window) {
  Slot* pick = nullptr;
  for (auto& slot : slots_) {
    if (slot.acquired || std::find(window.begin(), window.end(), slot.layer) != window.end()) continue;
    const bool empty = slot.layer < 0, pick_empty = pick && pick->layer < 0;
    if (!pick || (empty && !pick_empty) || (empty == pick_empty && slot.last_use < pick->last_use)) pick = &slot;
  }
  return pick;
}

void ShardedWeights::start_gather(Slot& slot, int64_t layer) {
  if (slot.gathering) comm_.wait(*slot.gathering);  // a gather the announced order no longer wants
  const auto& shard = shards_.at(layer);
  slot.buffer.unsafeGetTensorImpl()->bump_version();  // tensors saved from its last layer go stale
  slot.gathering = comm_.start_allgather_into(slot.buffer.narrow(0, 0, shard.padded_bytes),
                                              shard.bytes,
                                              "gathering the base weights of layer " + std::to_string(layer));
  slot.layer = layer;
  slot.last_use = ++clock_;
  ++gathers_;
  gathered_bytes_ += shard.padded_bytes;
}

std::vector<int64_t> ShardedWeights::window() const {
  // The next depth_ distinct layers the compute will want, not counting those it holds.
  std::vector<int64_t> w;
  for (size_t p = cursor_; p < order_.size() && static_cast<int64_t>(w.size()) < depth_; ++p) {
    const int64_t l = order_[p];
    bool held = false;
    for (const auto& slot : slots_) held = held || (slot.layer == l && slot.acquired);
    if (held || std::find(w.begin(), w.end(), l) != w.end()) continue;
    w.push_back(l);
  }
  return w;
}

void ShardedWeights::gather_ahead() {
  const auto w = window();
  for (const int64_t l : w) {
    if (holding(l)) continue;
    Slot* slot = free_slot(w);
    if (!slot) break;
    start_gather(*slot, l);
  }
}

void ShardedWeights::plan_acquisitions(const std::vector<int64_t>& order) {
  std::lock_guard<std::mutex> lock(mutex_);
  order_ = order;
  cursor_ = 0;
  gather_ahead();
}

void ShardedWeights::acquire(int64_t layer) {
  TORCH_CHECK(model_, "acquire(", layer, ") before bind_model");
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t p = cursor_; p < order_.size(); ++p) {
    if (order_[p] == layer) {
      cursor_ = p + 1;
      break;
    }
  }
  Slot* slot = holding(layer);
  TORCH_CHECK(!slot || !slot->acquired, "layer ", layer, " is acquired twice");
  if (!slot) {
    // Not announced, or no slot was free ahead of time: gathered now, while the compute waits.
    ++unprepared_;
    slot = free_slot({});
    TORCH_CHECK(slot,
                "layer ",
                layer,
                " cannot be gathered: all ",
                slots_.size(),
                " slots hold acquired layers (a layer acquired without release?)");
    start_gather(*slot, layer);
  }
  if (slot->gathering) {
    comm_.wait(*slot->gathering);
    slot->gathering.reset();
  }
  slot->acquired = true;
  bind_layer(model_->layers().at(layer), shards_.at(layer).layout.views(slot->buffer));
  gather_ahead();
}

void ShardedWeights::release(int64_t layer) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot* slot = holding(layer);
  TORCH_CHECK(slot && slot->acquired, "layer ", layer, " is released but was not acquired");
  slot->acquired = false;
  slot->last_use = ++clock_;
  bind_layer(model_->layers().at(layer), placeholders(shards_.at(layer).layout));
  gather_ahead();
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
