// See sharded_base.h.
#include "engine/dist/sharded_base.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "engine/model/base_tensors.h"

namespace qtrain::engine::dist {
namespace {

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

// A gather into a slot: done once Comm::wait has returned for it.
class GatherFence final : public offload::Fence {
 public:
  GatherFence(Comm& comm, Comm::Pending pending) : comm_(comm), pending_(std::move(pending)) {}
  bool ready() const override { return waited_; }
  // Only a destructor (the slot ring's) waits while an exception is on its way out: then a peer
  // may be gone and the process ends anyway, so it does not wait for the collective.
  void synchronize() const override {
    if (waited_ || std::uncaught_exceptions() > 0) return;
    comm_.wait(pending_);
    waited_ = true;
  }

 private:
  Comm& comm_;
  // Waited for under the streamed weights' lock.
  mutable Comm::Pending pending_;
  mutable bool waited_ = false;
};

}  // namespace

ShardedBase::ShardedBase(Comm& comm, const schedule::ResidencyPlan& plan) : comm_(comm), plan_(plan) {
  TORCH_CHECK(plan_.shard_base(), "a sharded base needs a residency plan with shard_base");
}

ShardedBase::~ShardedBase() {
  if (std::uncaught_exceptions() > 0) return;
  for (auto& in : incoming_) {
    try {
      comm_.wait(in.description_sent);
      comm_.wait(in.shard_sent);
    } catch (...) {
      // A failed transfer was reported by the collective that came after it; nothing to add.
    }
  }
}

void ShardedBase::prepare_load(model::LoadOptions& options) {
  device_ = options.device;
  options.host_layers = plan_.host_layers();
  options.reads_layer_weights = [this](int64_t i) { return reader_of(i) == comm_.rank(); };
  options.on_layer_loaded = [this](int64_t i, model::DecoderLayer& layer) { shard_layer(i, layer); };
}

void ShardedBase::shard_layer(int64_t index, model::DecoderLayer& layer) {
  TORCH_CHECK(!bound_, "layer ", index, " is sharded after the model was bound");
  TORCH_CHECK(!shards_.count(index), "layer ", index, " is sharded twice");
  at::NoGradGuard no_grad;
  const auto tensors = model::layer_base_tensors(layer);
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
  const bool host = plan_.weights(index) == schedule::WeightHome::host_shard;
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
  // Drops the whole tensors (kept by the scatter until sent).
  model::bind_layer_base_tensors(layer, placeholders(s.layout));
  shards_.emplace(index, std::move(s));
}

void ShardedBase::wait_incoming(int64_t up_to_layer) {
  for (auto& in : incoming_) {
    if (in.layer > up_to_layer) continue;
    comm_.wait(in.description_sent);  // a no-op once waited for
    comm_.wait(in.shard_sent);
  }
}

void ShardedBase::bind_model(model::CausalLM& model) {
  const int64_t n = static_cast<int64_t>(model.layers().size());
  TORCH_CHECK(static_cast<int64_t>(shards_.size()) == n,
              "the model has ",
              n,
              " layers but ",
              shards_.size(),
              " were sharded; load it with the options ShardedBase::prepare_load sets");
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
  bound_ = true;
}

at::Tensor ShardedBase::device_buffer(int64_t bytes) {
  return at::empty({bytes}, at::TensorOptions(at::kByte).device(device_));
}

int64_t ShardedBase::max_fill_bytes() const {
  int64_t m = 0;
  for (const auto& [layer, s] : shards_) m = std::max(m, s.padded_bytes);
  return m;
}

offload::FencePtr ShardedBase::fill(int64_t layer, const at::Tensor& dst, const offload::FencePtr& after) {
  TORCH_CHECK(bound_, "layer ", layer, " is gathered before bind_model");
  TORCH_INTERNAL_ASSERT(!after, "a gather is ordered after the compute without a fence (compute_fence)");
  return std::make_shared<GatherFence>(
      comm_,
      comm_.start_allgather_into(
          dst, shards_.at(layer).bytes, "gathering the base weights of layer " + std::to_string(layer)));
}

void ShardedBase::compute_wait(const offload::FencePtr& fence) {
  fence->synchronize();
}

std::vector<at::Tensor> ShardedBase::resting_tensors(int64_t layer) const {
  return placeholders(shards_.at(layer).layout);
}

int64_t ShardedBase::shard_bytes() const {
  int64_t total = 0;
  for (const auto& [layer, s] : shards_) total += s.bytes.numel();
  return total;
}

int64_t ShardedBase::layers_read() const {
  int64_t read = 0;
  for (const auto& [layer, s] : shards_) read += reader_of(layer) == comm_.rank() ? 1 : 0;
  return read;
}

int64_t ShardedBase::host_shard_bytes() const {
  TORCH_CHECK(bound_, "host_shard_bytes() before bind_model");
  int64_t total = 0;
  for (const auto& [layer, s] : shards_) total += s.bytes.device() != device_ ? s.bytes.numel() : 0;
  return total;
}

}  // namespace qtrain::engine::dist
