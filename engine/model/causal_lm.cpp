// See causal_lm.h.
#include "engine/model/causal_lm.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "engine/io/bnb_checkpoint.h"
#include "engine/lora/adapters_off.h"
#include "engine/model/layer_tensors.h"
#include "ops/host_read.h"
#include "ops/linear_dense.h"
#include "ops/nn/cross_entropy.h"

namespace qtrain::engine::model {
namespace {

// Note [Multimodal Gemma 3 tensor names]
// A Gemma3ForConditionalGeneration holds its decoder at model.language_model.* in memory (the
// names qtrain gives its layers, so that adapters match PEFT's on the same model), but stores it
// as language_model.model.* (and an untied head as language_model.lm_head) in the checkpoint:
// transformers 5 renames on load and back on save (conversion_mapping.py, "llava"). Its vision
// tower and projector are not read.

// Note [Expert tensor names]
// transformers 5 holds a sparse layer's experts as two 3-D parameters, mlp.experts.gate_up_proj
// [E, 2I, H] (rows 0..I-1 of each expert are gate_proj, I..2I-1 up_proj) and
// mlp.experts.down_proj [E, H, I], and its router as mlp.gate.weight [E, H]. Its save_pretrained
// writes them back per expert by default (save_original_format=True), as the Hub checkpoints
// are: Qwen3-MoE mlp.experts.{e}.gate_proj / up_proj / down_proj.weight, Mixtral
// block_sparse_moe.experts.{e}.w1 (gate) / w3 (up) / w2 (down).weight and
// block_sparse_moe.gate.weight; with save_original_format=False the fused names. All three are
// read; qtrain keeps one [2I, H] and one [H, I] weight per expert, so each expert is quantized on
// its own. Gemma 4 holds them at layers.N.experts.gate_up_proj / down_proj (same layout, no mlp.
// level) and its router at layers.N.router.{proj.weight, scale, per_expert_scale}, and
// transformers stores them so (no per-expert form).

// The same tensors with no values: meta tensors of their sizes and dtypes.
std::vector<at::Tensor> without_values(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> meta;
  for (const auto& t : tensors) meta.push_back(at::empty(t.sizes(), t.options().device(at::kMeta)));
  return meta;
}

// A per-expert checkpoint's keys for expert `e` of the block at `block` (Note [Expert tensor
// names]): Mixtral's w1/w3/w2 or Qwen3-MoE's gate_proj/up_proj/down_proj.
struct ExpertKeys {
  std::string gate, up, down;
};
ExpertKeys expert_keys(const std::string& block, int64_t e, bool mixtral_names) {
  const auto ex = block + "experts." + std::to_string(e) + ".";
  return mixtral_names ? ExpertKeys{ex + "w1.weight", ex + "w3.weight", ex + "w2.weight"}
                       : ExpertKeys{ex + "gate_proj.weight", ex + "up_proj.weight", ex + "down_proj.weight"};
}

// Reads tensors by their in-memory names; `stored` maps such a name to the checkpoint's.
struct Loader {
  const io::HfFolder& folder;
  const LoadOptions& options;
  std::string memory_prefix;  // ModelConfig::weight_prefix
  std::string stored_prefix;  // the same prefix as the checkpoint spells it
  // Base linear weights (attention, MLP, experts) are placeholders: their shapes are checked from
  // the checkpoint's header, their values not read (LoadOptions::reads_layer_weights).
  bool placeholders = false;

  std::string stored(const std::string& name) const {
    if (memory_prefix == stored_prefix) return name;
    if (name.rfind(memory_prefix, 0) == 0) return stored_prefix + name.substr(memory_prefix.size());
    return name == "lm_head.weight" ? "language_model.lm_head.weight" : name;
  }

  bool contains(const std::string& name) const { return folder.contains(stored(name)); }

  void check_present(const std::string& name) const {
    TORCH_CHECK(contains(name),
                folder.dir().string(),
                ": tensor '",
                stored(name),
                "' is missing from the checkpoint; is the folder a complete ",
                "Hugging Face model?");
  }

  at::Tensor tensor(const std::string& name) const {
    check_present(name);
    return folder.tensor(stored(name));
  }

  at::Tensor plain(const std::string& name) const {
    return tensor(name).to(options.device, options.dtype).contiguous();
  }

  std::optional<at::Tensor> optional_plain(const std::string& name) const {
    if (!contains(name)) return std::nullopt;
    return plain(name);
  }

  // A linear weight: already quantized by bitsandbytes (4-bit or 8-bit keys present), or float
  // and quantized here as the options say.
  LinearLayer linear(const std::string& module, bool has_bias) const {
    const auto weight_name = stored(module + ".weight");
    const auto bias = has_bias ? std::optional<at::Tensor>(plain(module + ".bias")) : optional_plain(module + ".bias");
    if (io::is_bnb_4bit(folder, weight_name)) return prequantized(module, io::read_bnb_4bit(folder, weight_name), bias);
    if (io::is_bnb_int8(folder, weight_name)) return prequantized(module, io::read_bnb_int8(folder, weight_name), bias);
    if (placeholders) {
      check_present(module + ".weight");
      const auto shape = folder.shape(weight_name);
      TORCH_CHECK(shape.size() == 2,
                  folder.dir().string(),
                  ": ",
                  weight_name,
                  " must be 2-D [out, in], got ",
                  at::IntArrayRef(shape));
      return LinearLayer::placeholder(
          module, shape[0], shape[1], folder.dtype(weight_name), bias, options.quant, options.dtype);
    }
    return LinearLayer::make(module, tensor(module + ".weight").to(options.device), bias, options.quant, options.dtype);
  }

  // A bitsandbytes weight as read (views of the mapped file: only its small quantization state has
  // been read), on the device, or as placeholders of its tensors.
  template <class Weight>
  LinearLayer prequantized(const std::string& module,
                           const Weight& weight,
                           const std::optional<at::Tensor>& bias) const {
    if (!placeholders) return LinearLayer::from_weight(module, weight.to(options.device), bias, options.quant);
    auto l = LinearLayer::from_weight(module, weight, bias, options.quant);
    l.rebind_base_tensors(without_values(l.base_tensors()));
    return l;
  }

  // A checkpoint tensor that must have `shape`; the error names the key.
  at::Tensor shaped(const std::string& name, at::IntArrayRef shape) const {
    check_shape(name, shape);
    return tensor(name);
  }

  // The same check from the checkpoint's header, reading no values.
  void check_shape(const std::string& name, at::IntArrayRef shape) const {
    check_present(name);
    const auto stored_shape = folder.shape(stored(name));
    TORCH_CHECK(at::IntArrayRef(stored_shape) == shape,
                folder.dir().string(),
                ": ",
                stored(name),
                " is ",
                at::IntArrayRef(stored_shape),
                " but config.json implies ",
                shape);
  }

  // Gemma 4's router of layer `p` (Note [Gemma 4 router]) in the compute dtype. transformers'
  // load_in_4bit quantizes router.proj (an nn.Linear), so a bitsandbytes checkpoint may hold it
  // quantized: it is dequantized here, as qtrain never quantizes a router.
  Gemma4Router gemma4_router(const std::string& p, const ModelConfig& c) const {
    const int64_t e_count = c.moe->num_experts, h = c.hidden_size;
    const auto proj = stored(p + "router.proj.weight");
    const bool prequantized = io::is_bnb_4bit(folder, proj) || io::is_bnb_int8(folder, proj);
    Gemma4Router r;
    Loader whole = *this;  // a router is read in full on every rank: it is not a base linear
    whole.placeholders = false;
    r.proj = prequantized ? whole.linear(p + "router.proj", false).dense_weight(options.dtype)
                          : shaped(p + "router.proj.weight", {e_count, h});
    TORCH_CHECK(r.proj.sizes() == at::IntArrayRef({e_count, h}),
                folder.dir().string(),
                ": ",
                proj,
                " is ",
                r.proj.sizes(),
                " but config.json implies [",
                e_count,
                ", ",
                h,
                "]");
    r.proj = r.proj.to(options.device, options.dtype).contiguous();
    r.scale = shaped(p + "router.scale", {h}).to(options.device, options.dtype).contiguous();
    r.per_expert_scale =
        shaped(p + "router.per_expert_scale", {e_count}).to(options.device, options.dtype).contiguous();
    r.top_k = c.moe->top_k;
    r.eps = c.rms_norm_eps;
    return r;
  }

  // The router and experts of sparse layer `p` ("model.layers.N."). See Note [Expert tensor names].
  MoeBlock moe(const std::string& p, const ModelConfig& c) const {
    const auto& m = *c.moe;
    const int64_t e_count = m.num_experts, h = c.hidden_size, i = m.expert_intermediate_size;
    const bool gemma4 = c.arch == Architecture::gemma4;
    const bool mixtral_names = contains(p + "block_sparse_moe.gate.weight");
    const auto block = p + (gemma4 ? "" : mixtral_names ? "block_sparse_moe." : "mlp.");
    MoeBlock b;
    if (gemma4) {
      b.gemma4_router = gemma4_router(p, c);
    } else {
      b.router = shaped(block + "gate.weight", {e_count, h}).to(options.device, options.dtype).contiguous();
    }
    b.router_module = p + m.router_path;
    b.router_stored = gemma4 ? p + "router.proj.weight" : block + "gate.weight";
    b.experts.name = p + m.experts_path;
    b.experts.act = c.hidden_act;
    b.experts.kernel = options.expert_kernel;
    const QuantSpec quant = options.quantize_moe_experts ? options.quant : QuantSpec{};
    // transformers writes Gemma 4's experts fused only (it has no conversion mapping for them).
    const bool fused = gemma4 || contains(block + "experts.gate_up_proj");
    if (placeholders) {
      placeholder_experts(b.experts, block, fused, mixtral_names, e_count, h, i, quant);
      return b;
    }
    at::Tensor gate_up_all, down_all;
    if (fused) {
      gate_up_all = shaped(block + "experts.gate_up_proj", {e_count, 2 * i, h});
      down_all = shaped(block + "experts.down_proj", {e_count, h, i});
    }
    for (int64_t e = 0; e < e_count; ++e) {
      at::Tensor gate_up, down;
      if (fused) {
        gate_up = gate_up_all[e];
        down = down_all[e];
      } else {
        const auto k = expert_keys(block, e, mixtral_names);
        gate_up = at::cat({shaped(k.gate, {i, h}), shaped(k.up, {i, h})});
        down = shaped(k.down, {h, i});
      }
      const auto name = b.experts.name + "." + std::to_string(e);
      b.experts.gate_up.push_back(LinearLayer::make(
          name + ".gate_up_proj", gate_up.to(options.device).contiguous(), std::nullopt, quant, options.dtype));
      b.experts.down.push_back(LinearLayer::make(
          name + ".down_proj", down.to(options.device).contiguous(), std::nullopt, quant, options.dtype));
    }
    return b;
  }

  // moe()'s experts as placeholders, every checkpoint tensor's shape checked as moe() checks it.
  void placeholder_experts(MoeExperts& experts,
                           const std::string& block,
                           bool fused,
                           bool mixtral_names,
                           int64_t e_count,
                           int64_t h,
                           int64_t i,
                           const QuantSpec& quant) const {
    at::ScalarType gate_up_dtype = at::kFloat, down_dtype = at::kFloat;
    if (fused) {
      check_shape(block + "experts.gate_up_proj", {e_count, 2 * i, h});
      check_shape(block + "experts.down_proj", {e_count, h, i});
      gate_up_dtype = folder.dtype(stored(block + "experts.gate_up_proj"));
      down_dtype = folder.dtype(stored(block + "experts.down_proj"));
    }
    for (int64_t e = 0; e < e_count; ++e) {
      if (!fused) {
        const auto k = expert_keys(block, e, mixtral_names);
        check_shape(k.gate, {i, h});
        check_shape(k.up, {i, h});
        check_shape(k.down, {h, i});
        // at::cat of the two halves gives their promoted dtype.
        gate_up_dtype = at::promoteTypes(folder.dtype(stored(k.gate)), folder.dtype(stored(k.up)));
        down_dtype = folder.dtype(stored(k.down));
      }
      const auto name = experts.name + "." + std::to_string(e);
      experts.gate_up.push_back(LinearLayer::placeholder(
          name + ".gate_up_proj", 2 * i, h, gate_up_dtype, std::nullopt, quant, options.dtype));
      experts.down.push_back(
          LinearLayer::placeholder(name + ".down_proj", h, i, down_dtype, std::nullopt, quant, options.dtype));
    }
  }
};

// See Note [Multimodal Gemma 3 tensor names].
std::string stored_prefix(const io::HfFolder& folder, const ModelConfig& c) {
  if (c.weight_prefix != "model." && !folder.contains(c.weight_prefix + "embed_tokens.weight") &&
      folder.contains("language_model.model.embed_tokens.weight")) {
    return "language_model.model.";
  }
  return c.weight_prefix;
}

// Decoder layer i as `layer_load` reads it (placeholders or values), checked against `c`.
DecoderLayer read_layer(const Loader& layer_load, const ModelConfig& c, int64_t i) {
  const auto& folder = layer_load.folder;
  const auto& options = layer_load.options;
  const auto p = c.weight_prefix + "layers." + std::to_string(i) + ".";
  DecoderLayer l;
  l.index = i;
  l.attention = c.attention(i);
  // The norms and linears of Note [Layer tensors]; then what is outside that table.
  const auto tensors = layer_tensors(c, i);
  for (const auto& t : tensors) {
    if (t.linear()) {
      set_linear(l, t.part, layer_load.linear(p + t.module, t.bias));
    } else {
      set_norm(l, t.part, layer_load.plain(p + t.module + ".weight"));
    }
  }
  if (c.arch == Architecture::gemma4) l.layer_scalar = layer_load.plain(p + "layer_scalar");
  if (c.layer_is_sparse(i)) l.moe = layer_load.moe(p, c);
  if (!layer_load.placeholders &&
      std::find(options.host_layers.begin(), options.host_layers.end(), i) != options.host_layers.end()) {
    for (auto* lin : l.weight_linears()) {
      std::vector<at::Tensor> host;
      for (const auto& t : lin->base_tensors()) host.push_back(t.cpu());
      lin->rebind_base_tensors(host);
    }
  }
  l.sliding_window = c.sliding_window[i];
  // Without v_proj (k_eq_v) the table has none to check.
  std::vector<std::tuple<const LinearLayer*, int64_t, int64_t>> shapes;
  for (const auto& t : tensors) {
    if (t.linear()) shapes.emplace_back(&find_linear(l, t.part), t.shape[0], t.shape[1]);
  }
  for (auto [lin, out, in] : shapes) {
    TORCH_CHECK(lin->out_features == out && lin->in_features == in,
                folder.dir().string(),
                ": ",
                lin->name,
                ".weight is [",
                lin->out_features,
                ", ",
                lin->in_features,
                "] but config.json implies [",
                out,
                ", ",
                in,
                "]");
  }
  return l;
}

}  // namespace

CausalLM CausalLM::load(const io::HfFolder& folder, const LoadOptions& options) {
  const auto t = options.dtype;
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
              "compute dtype ",
              t,
              " is not supported; use float32, bfloat16 or float16");
  CausalLM m;
  auto config = folder.config();
  for (const auto& [key, value] : options.model_config.items()) config[key] = value;
  m.config_ = ModelConfig::from_json(config, (folder.dir() / "config.json").string());
  m.dtype_ = t;
  m.device_ = options.device;
  const auto& c = m.config_;
  const Loader load{folder, options, c.weight_prefix, stored_prefix(folder, m.config_)};
  const auto& prefix = c.weight_prefix;
  m.embed_ = load.plain(prefix + "embed_tokens.weight");
  TORCH_CHECK(m.embed_.size(0) == c.vocab_size && m.embed_.size(1) == c.hidden_size,
              folder.dir().string(),
              ": ",
              load.stored(prefix + "embed_tokens.weight"),
              " is ",
              m.embed_.sizes(),
              " but config.json says [",
              c.vocab_size,
              ", ",
              c.hidden_size,
              "]");
  m.norm_ = load.plain(prefix + "norm.weight");
  const bool tied = c.tie_word_embeddings || !load.contains("lm_head.weight");
  m.lm_head_ = tied ? m.embed_ : load.plain("lm_head.weight");
  if (c.gemma) {
    // Gemma2TextScaledWordEmbedding (and Gemma 3's, 4's): sqrt(H) as a float32 scalar, cast to the
    // embedding dtype.
    m.embed_scale_ = at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), at::kFloat).to(options.device, t);
  }
  m.inv_freq_ = ops::rope_inv_freq(c.rope_head_dim(false), c.rope_theta, c.rope_scaling).to(options.device);
  if (c.sliding_rope) {
    m.sliding_inv_freq_ =
        ops::rope_inv_freq(c.rope_head_dim(true), c.sliding_rope->theta, c.sliding_rope->scaling).to(options.device);
  }
  m.layers_.reserve(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Loader layer_load = load;
    layer_load.placeholders = options.reads_layer_weights && !options.reads_layer_weights(i);
    DecoderLayer l = read_layer(layer_load, c, i);
    if (options.on_layer_loaded) options.on_layer_loaded(i, l);
    m.layers_.push_back(std::move(l));
  }
  return m;
}

DecoderLayer CausalLM::load_layer(const io::HfFolder& folder, const LoadOptions& options, int64_t i) const {
  Loader load{folder, options, config_.weight_prefix, stored_prefix(folder, config_)};
  return read_layer(load, config_, i);
}

at::Tensor CausalLM::embed(const at::Tensor& ids) const {
  TORCH_CHECK(ids.scalar_type() == at::kLong && ids.dim() == 2,
              "input ids must be int64 [batch, seq], got ",
              ids.scalar_type(),
              " ",
              ids.sizes());
  // Ids on the host are checked here; ids already on a device were checked where the data was read
  // (pre-tokenized ids against the vocabulary; a tokenizer's ids are within it), since checking
  // them here would make the host wait for the device (Note [Host reads] in ops/host_read.h).
  TORCH_CHECK(!ids.is_cpu() || ids.numel() == 0 ||
                  (ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < config_.vocab_size),
              "a token id is outside the model's vocabulary [0, ",
              config_.vocab_size,
              "): the data was tokenized for another model");
  auto h = at::embedding(embed_weight(), ids.to(device_));
  return embed_scale_.defined() ? h * embed_scale_ : h;
}

LayerInputs CausalLM::layer_inputs(int64_t seq_len) const {
  return layer_inputs(at::arange(seq_len, at::TensorOptions().dtype(at::kLong).device(device_)));
}

LayerInputs CausalLM::layer_inputs(const at::Tensor& positions) const {
  LayerInputs in;
  const auto pos = positions.to(device_, at::kLong);
  in.rope = ops::rope_tables(inv_freq_, pos, dtype_);
  if (sliding_inv_freq_.defined()) in.sliding_rope = ops::rope_tables(sliding_inv_freq_, pos, dtype_);
  return in;
}

at::Tensor CausalLM::final_norm(const at::Tensor& h) const {
  return model_rms_norm(config_, h, norm_);
}

at::Tensor CausalLM::logits(const at::Tensor& h) const {
  auto logits = ops::linear_dense(h, head_weight(), std::nullopt);
  return config_.final_logit_softcap ? ops::softcap_logits(logits, *config_.final_logit_softcap) : logits;
}

int64_t predicted_token_count(const at::Tensor& labels) {
  TORCH_CHECK(labels.is_cpu() && labels.dim() == 2, "predicted_token_count: labels must be [B, T] on the host");
  if (labels.size(1) < 2) return 0;
  return (labels.narrow(1, 1, labels.size(1) - 1) != ops::kIgnoreIndex).sum().item<int64_t>();
}

namespace {

// t [B, T] shifted left by one: position t holds t + 1's value, the last position `last`.
at::Tensor shifted_left(const at::Tensor& t, const at::Scalar& last) {
  return at::cat({t.narrow(1, 1, t.size(1) - 1), at::full({t.size(0), 1}, last, t.options())}, 1);
}

// labels [B, T] shifted left by one on the model's device: position t holds label t + 1, the last
// position -100.
at::Tensor shifted_labels(const at::Tensor& labels, const at::Device& device) {
  return shifted_left(labels.to(device, at::kLong), ops::kIgnoreIndex);
}

}  // namespace

std::pair<at::Tensor, int64_t> CausalLM::loss_sum(const at::Tensor& h,
                                                  const at::Tensor& labels,
                                                  int64_t predicted_tokens) const {
  TORCH_CHECK(labels.sizes() == h.sizes().slice(0, 2),
              "labels ",
              labels.sizes(),
              " do not match the batch ",
              h.sizes().slice(0, 2));
  // Position t predicts label t+1; the last position predicts nothing.
  auto shifted = shifted_labels(labels, device_).reshape({-1});
  const int64_t count = predicted_tokens >= 0 ? predicted_tokens
                        : labels.is_cpu()
                            ? predicted_token_count(labels)
                            : ops::read_scalar<int64_t>((shifted != ops::kIgnoreIndex).sum(), "loss: predicted tokens");
  const auto chunk =
      ops::cross_entropy_chunk_tokens(lm_head_.size(0), h.scalar_type(), config_.final_logit_softcap.has_value());
  auto sum = ops::chunked_cross_entropy_sum(
      h.reshape({-1, h.size(-1)}), head_weight(), shifted, chunk, config_.final_logit_softcap);
  return {sum, count};
}

at::Tensor CausalLM::sequence_log_probs(const at::Tensor& h,
                                        const at::Tensor& labels,
                                        const at::Tensor& token_weights) const {
  TORCH_CHECK(labels.sizes() == h.sizes().slice(0, 2),
              "labels ",
              labels.sizes(),
              " do not match the batch ",
              h.sizes().slice(0, 2));
  TORCH_CHECK(!token_weights.defined() || token_weights.sizes() == labels.sizes(),
              "token weights ",
              token_weights.sizes(),
              " do not match the labels ",
              labels.sizes());
  const auto shifted = shifted_labels(labels, device_);
  // Shifted as the labels: position t's weight is that of the token it predicts.
  const auto shifted_weights = token_weights.defined() ? shifted_left(token_weights, 0) : at::Tensor();
  const auto chunk =
      ops::cross_entropy_chunk_tokens(lm_head_.size(0), h.scalar_type(), config_.final_logit_softcap.has_value());
  const auto weight = head_weight();
  std::vector<at::Tensor> rows;
  for (int64_t r = 0; r < h.size(0); ++r) {
    rows.push_back(-ops::chunked_cross_entropy_sum(h[r],
                                                   weight,
                                                   shifted[r],
                                                   chunk,
                                                   config_.final_logit_softcap,
                                                   shifted_weights.defined() ? shifted_weights[r] : at::Tensor()));
  }
  return at::stack(rows);
}

at::Tensor CausalLM::head_sums(const at::Tensor& h,
                               const at::Tensor& positions,
                               const at::Tensor& labels,
                               HeadSumsOf of) const {
  TORCH_CHECK(positions.sizes() == h.sizes().slice(0, 2),
              "positions ",
              positions.sizes(),
              " do not match the batch ",
              h.sizes().slice(0, 2));
  TORCH_CHECK(positions.is_cpu(),
              "head_sums: the positions must be host data (selecting them on a device makes the host wait "
              "for it: Note [Host reads])");
  TORCH_CHECK(!labels.defined() || labels.is_cpu(), "head_sums: the labels must be host data (Note [Host reads])");
  at::NoGradGuard no_grad;
  const auto weight = head_weight();
  constexpr int64_t kChunk = 256;  // positions per [chunk, V] block of logits
  std::vector<at::Tensor> rows;
  for (int64_t r = 0; r < h.size(0); ++r) {
    const auto chosen = at::nonzero(positions[r].to(at::kBool)).squeeze(1);
    const auto selected = h[r].index_select(0, ops::to_device_async(chosen, device_));
    // The token each chosen position predicts (host data, so copied without a host read).
    const auto targets =
        labels.defined()
            ? ops::to_device_async(
                  labels[r].narrow(0, 1, labels.size(1) - 1).index_select(0, chosen.clamp_max(labels.size(1) - 2)),
                  device_)
            : at::Tensor();
    auto sum = at::zeros({4}, h.options().dtype(at::kFloat));
    const bool wpo = of.wpo && targets.defined();
    for (int64_t i = 0; i < selected.size(0); i += kChunk) {
      const int64_t count = std::min(kChunk, selected.size(0) - i);
      auto logits = ops::linear_dense(selected.narrow(0, i, count), weight, std::nullopt);
      if (config_.final_logit_softcap) logits = ops::softcap_logits(logits, *config_.final_logit_softcap);
      logits = logits.to(at::kFloat);
      const auto zero = at::zeros({}, sum.options());
      const auto log_probs = of.entropy || wpo ? at::log_softmax(logits, -1) : at::Tensor();
      const auto entropy_sum = [&] { return (-(log_probs.exp() * log_probs).sum(-1)).sum(); };
      // log p(token) - log sum_v p_v^2, the latter as logsumexp(2 log p).
      const auto wpo_sum = [&] {
        const auto target = log_probs.gather(1, targets.narrow(0, i, count).unsqueeze(1)).squeeze(1);
        return (target - at::logsumexp(2 * log_probs, -1)).sum();
      };
      const auto top1 =
          targets.defined() ? (logits.argmax(-1) == targets.narrow(0, i, count)).to(at::kFloat).sum() : zero;
      sum = sum + at::stack({logits.mean(-1).sum(), of.entropy ? entropy_sum() : zero, top1, wpo ? wpo_sum() : zero});
    }
    rows.push_back(sum);
  }
  return at::stack(rows);
}

std::vector<at::Tensor> CausalLM::trainable_parameters() const {
  std::vector<at::Tensor> params;
  for (const auto& l : layers_) {
    auto p = l.trainable_parameters();
    params.insert(params.end(), p.begin(), p.end());
  }
  for (const auto* t : {&trained_embed_, &trained_head_}) {
    if (t->defined()) params.push_back(*t);
  }
  // The layers' trained norms came with their layers.
  if (const auto final = trained_norms_.find(config_.weight_prefix + "norm"); final != trained_norms_.end()) {
    params.push_back(final->second);
  }
  return params;
}

namespace {

void check_trained(const at::Tensor& w, const at::Tensor& frozen, const at::Device& device, const std::string& what) {
  TORCH_CHECK(!w.defined() || (w.scalar_type() == at::kFloat && w.sizes() == frozen.sizes() && w.device() == device &&
                               w.is_leaf() && w.requires_grad()),
              "the trained ",
              what,
              " must be a float32 trainable leaf of shape ",
              frozen.sizes(),
              " on ",
              device,
              ", got ",
              w.defined() ? c10::str(w.scalar_type(), " ", w.sizes(), " on ", w.device()) : std::string());
}

}  // namespace

void CausalLM::set_trained_embed_tokens(const at::Tensor& weight) {
  check_trained(weight, embed_, device_, "embed_tokens");
  trained_embed_ = weight;
}

void CausalLM::set_trained_lm_head(const at::Tensor& weight) {
  check_trained(weight, lm_head_, device_, "lm_head");
  trained_head_ = weight;
}

std::vector<std::pair<std::string, at::Tensor>> CausalLM::norm_weights() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& layer : layers_) {
    const std::string prefix = config_.weight_prefix + "layers." + std::to_string(layer.index) + ".";
    for (const auto& [name, weight] : layer.norms()) out.emplace_back(prefix + name, *weight);
  }
  out.emplace_back(config_.weight_prefix + "norm", norm_);
  return out;
}

void CausalLM::set_trained_norm(const std::string& module, const at::Tensor& weight) {
  at::Tensor* slot = module == config_.weight_prefix + "norm" ? &norm_ : nullptr;
  for (auto& layer : layers_) {
    const std::string prefix = config_.weight_prefix + "layers." + std::to_string(layer.index) + ".";
    if (slot != nullptr || !module.starts_with(prefix)) continue;
    for (auto& [name, w] : layer.norms()) {
      if (prefix + name == module) slot = w;
    }
  }
  TORCH_CHECK(slot != nullptr, "set_trained_norm: this model has no norm ", module);
  TORCH_CHECK(weight.defined(), "set_trained_norm: no weight for ", module);
  check_trained(weight, *slot, device_, module);
  *slot = weight;
  trained_norms_[module] = weight;
}

void CausalLM::set_embeddings(const at::Tensor& embed, const at::Tensor& head) {
  TORCH_CHECK(!trained_embed_.defined() && !trained_head_.defined(),
              "set_embeddings: the embeddings change before modules trained in full are attached");
  const bool tied = lm_head_.is_same(embed_);
  for (const auto* t : {&embed, &head}) {
    TORCH_CHECK(t->dim() == 2 && t->size(0) == embed.size(0) && t->size(1) == config_.hidden_size &&
                    t->scalar_type() == embed_.scalar_type() && t->device() == embed_.device(),
                "set_embeddings: expected [V, ",
                config_.hidden_size,
                "] ",
                embed_.scalar_type(),
                " on ",
                embed_.device(),
                ", got ",
                t->sizes(),
                " ",
                t->scalar_type(),
                " on ",
                t->device());
  }
  TORCH_CHECK(tied == head.is_same(embed), "set_embeddings: the head must stay ", tied ? "tied" : "untied");
  embed_ = embed;
  lm_head_ = head;
  config_.vocab_size = embed.size(0);
}

at::Tensor CausalLM::embed_weight() const {
  return trained_embed_.defined() && lora::adapters_on() ? trained_embed_.to(dtype_) : embed_;
}

at::Tensor CausalLM::head_weight() const {
  return trained_head_.defined() && lora::adapters_on() ? trained_head_.to(dtype_) : lm_head_;
}

}  // namespace qtrain::engine::model
