// See sharded_weights.h.
#include "engine/dist/sharded_weights.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "offload/prefetch_depth.h"

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

// What a layer's blob means besides its bytes, which a reader and the placeholders of the other
// ranks must agree on: every base linear's name and stored form (4-bit type, blocksize, shape and
// original dtype), every tensor's dtype and shape. Hashed into the description's signature.
int64_t layout_signature(const model::DecoderLayer& layer) {
  std::string s;
  for (const auto* lin : layer.weight_linears()) {
    s += lin->name + ":" + std::to_string(lin->weight.index());
    if (const auto* q4 = std::get_if<ops::Packed4bit>(&lin->weight)) {
      s += ",q" + std::to_string(static_cast<int>(q4->quant_type)) + "," + std::to_string(q4->blocksize) + "," +
           c10::toString(q4->dtype) + (q4->nested ? ",n" + std::to_string(q4->nested->blocksize) : "");
      for (const int64_t d : q4->shape) s += "," + std::to_string(d);
    }
    for (const auto& t : lin->base_tensors()) {
      s += ";" + std::string(c10::toString(t.scalar_type()));
      for (const int64_t d : t.sizes()) s += "," + std::to_string(d);
    }
    s += "|";
  }
  return static_cast<int64_t>(std::hash<std::string>{}(s));
}

// The 4-bit nested offsets of a layer's base linears, in weight_linears() order: the one part of
// a quantized weight that is not in its tensors.
std::vector<float*> nested_offsets(model::DecoderLayer& layer) {
  std::vector<float*> offsets;
  for (auto* lin : layer.weight_linears()) {
    auto* q4 = std::get_if<ops::Packed4bit>(&lin->weight);
    if (q4 && q4->nested) offsets.push_back(&q4->nested->offset);
  }
  return offsets;
}

}  // namespace

ShardedWeights::ShardedWeights(Comm& comm, int64_t prefetch_depth) : comm_(comm), depth_(prefetch_depth) {
  offload::check_prefetch_depth(depth_);
}

ShardedWeights::~ShardedWeights() {
  if (std::uncaught_exceptions() > 0) return;
  for (auto& in : incoming_) {
    try {
      comm_.wait(in.description_sent);
      comm_.wait(in.shard_sent);
    } catch (...) {
      // As below.
    }
  }
  for (auto& slot : slots_) {
    if (!slot.gathering) continue;
    try {
      comm_.wait(*slot.gathering);
    } catch (...) {
      // A failed gather was reported by the collective that came after it; nothing to add.
    }
  }
}

void ShardedWeights::prepare_load(model::LoadOptions& options) {
  device_ = options.device;
  host_layers_ = options.host_layers;
  options.reads_layer_weights = [this](int64_t i) { return reader_of(i) == comm_.rank(); };
  options.on_layer_loaded = [this](int64_t i, model::DecoderLayer& layer) { shard_layer(i, layer); };
}

void ShardedWeights::shard_layer(int64_t index, model::DecoderLayer& layer) {
  TORCH_CHECK(!model_, "layer ", index, " is sharded after the model was bound");
  TORCH_CHECK(!shards_.count(index), "layer ", index, " is sharded twice");
  at::NoGradGuard no_grad;
  const auto tensors = base_tensors(layer);
  TORCH_CHECK(!tensors.empty(), "layer ", index, " has no base weights to shard");
  const int64_t reader = reader_of(index);
  const bool reads = reader == comm_.rank();
  TORCH_CHECK(reads != tensors[0].is_meta(),
              "layer ",
              index,
              reads ? " should have been read by this rank" : " was read by this rank but rank ",
              reads ? "" : std::to_string(reader),
              " reads it; load with the options prepare_load sets");
  wait_incoming(index - comm_.world_size());  // the blobs of this rank's last layer are sent
  Shard s;
  s.layout = offload::BlobLayout::of(tensors);
  const int64_t world = comm_.world_size(), unit = world * offload::kBlobAlignment;
  s.padded_bytes = (s.layout.total_bytes() + unit - 1) / unit * unit;
  // The shard lives where the layer computes, or in host memory for an offloaded layer (loaded
  // there by the reader), pinned when a GPU will read it; it crosses to the device in the gather.
  const bool host = std::find(host_layers_.begin(), host_layers_.end(), index) != host_layers_.end();
  const at::Device where = reads ? tensors[0].device() : host ? at::Device(at::kCPU) : device_;
  s.bytes = at::empty({s.padded_bytes / world}, at::TensorOptions(at::kByte).device(where));
  if (s.bytes.is_cpu() && at::hasCUDA()) s.bytes = s.bytes.pin_memory();

  Incoming in;
  in.layer = index;
  const auto offsets = nested_offsets(layer);
  in.description = at::zeros({2 + static_cast<int64_t>(offsets.size())}, at::kLong);
  in.expected_bytes = s.layout.total_bytes();
  in.expected_signature = layout_signature(layer);
  at::Tensor blob;
  if (reads) {
    auto* d = in.description.data_ptr<int64_t>();
    d[0] = in.expected_bytes;
    d[1] = in.expected_signature;
    for (size_t k = 0; k < offsets.size(); ++k) {
      uint32_t bits = 0;
      std::memcpy(&bits, offsets[k], sizeof bits);
      d[2 + k] = bits;
    }
    blob = at::zeros({s.padded_bytes}, tensors[0].options().dtype(at::kByte));
    s.layout.pack(tensors, blob);
  }
  const std::string from = " of layer " + std::to_string(index) + " from rank " + std::to_string(reader);
  in.description_sent = comm_.start_broadcast(in.description, reader, "receiving the description" + from);
  in.shard_sent = comm_.start_scatter(s.bytes, blob, reader, "receiving the base weights" + from);
  incoming_.push_back(std::move(in));
  slot_bytes_ = std::max(slot_bytes_, s.padded_bytes);
  bind_layer(layer, placeholders(s.layout));  // drops the whole tensors (kept by the scatter until sent)
  shards_.emplace(index, std::move(s));
}

void ShardedWeights::wait_incoming(int64_t up_to_layer) {
  for (auto& in : incoming_) {
    if (in.layer > up_to_layer) continue;
    comm_.wait(in.description_sent);  // a no-op once waited for
    comm_.wait(in.shard_sent);
  }
}

void ShardedWeights::bind_model(model::CausalLM& model) {
  const int64_t n = static_cast<int64_t>(model.layers().size());
  TORCH_CHECK(static_cast<int64_t>(shards_.size()) == n,
              "the model has ",
              n,
              " layers but ",
              shards_.size(),
              " were sharded; load it with the options ShardedWeights::prepare_load sets");
  wait_incoming(n);
  for (const auto& in : incoming_) {
    const auto* d = in.description.const_data_ptr<int64_t>();
    TORCH_CHECK(d[0] == in.expected_bytes && d[1] == in.expected_signature,
                "layer ",
                in.layer,
                ": rank ",
                reader_of(in.layer),
                " read its base weights as ",
                d[0],
                " bytes with layout signature ",
                d[1],
                ", but rank ",
                comm_.rank(),
                " expects ",
                in.expected_bytes,
                " bytes with signature ",
                in.expected_signature,
                ". Every rank must load the same model folder with the same quantization settings");
    auto offsets = nested_offsets(model.layers().at(in.layer));
    for (size_t k = 0; k < offsets.size(); ++k) {
      const auto bits = static_cast<uint32_t>(d[2 + k]);
      std::memcpy(offsets[k], &bits, sizeof bits);
    }
  }
  incoming_.clear();
  model_ = &model;
  slots_.resize(offload::slots_for(n, depth_));
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

int64_t ShardedWeights::layers_read() const {
  int64_t read = 0;
  for (const auto& [layer, s] : shards_) read += reader_of(layer) == comm_.rank() ? 1 : 0;
  return read;
}

int64_t ShardedWeights::host_shard_bytes() const {
  TORCH_CHECK(model_, "host_shard_bytes() before bind_model");
  int64_t total = 0;
  for (const auto& [layer, s] : shards_) total += s.bytes.device() != model_->device() ? s.bytes.numel() : 0;
  return total;
}

}  // namespace qtrain::engine::dist
