// See gguf_architecture.h and Note [GGUF architectures] there.
#include "engine/train/gguf_architecture.h"

#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "engine/model/layer_tensors.h"

namespace qtrain::engine::train {
namespace {

using model::Architecture;

// A sparse layer's router and experts (outside Note [Layer tensors]): the router as stored
// (Qwen3-MoE; Mixtral's original names) and the experts as merged_tensor_makers stacks them.
const std::vector<std::pair<std::string, std::string>> kSparseParts = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.experts.gate_proj", "ffn_gate_exps.weight"},
    {"mlp.experts.up_proj", "ffn_up_exps.weight"},
    {"mlp.experts.down_proj", "ffn_down_exps.weight"},
};

// LlamaModel.permute: transformers' rotate-half rows of q / k to ggml's interleaved pairs.
at::Tensor permute_rows(const at::Tensor& w, int64_t heads) {
  auto shape = w.sizes().vec();
  std::vector<int64_t> split = {heads, 2, w.size(0) / heads / 2};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return w.reshape(split).transpose(1, 2).reshape(shape).contiguous();
}

// The window of the sliding layers (they all have one), 0 where no layer slides.
int64_t sliding_window(const model::ModelConfig& mc) {
  for (const auto& w : mc.sliding_window) {
    if (w) return *w;
  }
  return 0;
}

}  // namespace

GgufArchitecture::GgufArchitecture(const model::ModelConfig& mc, std::string name) : mc_(mc), name_(std::move(name)) {}

GgufArchitecture GgufArchitecture::of(const model::ModelConfig& mc) {
  const auto refuse = [&mc](const std::string& why) {
    TORCH_CHECK(false, "export-gguf: ", model::architecture_name(mc.arch), " ", why, " (docs/GGUF.md)");
  };
  if (mc.arch == Architecture::gemma4) {
    refuse("is not exported yet; Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, Gemma 2 and Gemma 3 are");
  }
  // Rope scaling as the converter writes it: Llama 3's (a rope_freqs tensor, written by
  // write_gguf) and linear (rope.scaling.type and .factor) on "llama", linear on Gemma 3 (its full
  // layers).
  const auto& rope = mc.rope_scaling.type;
  const bool llama = mc.arch == Architecture::llama || mc.arch == Architecture::mistral;
  if (rope != "default" && !(llama && (rope == "llama3" || rope == "linear")) &&
      !(mc.arch == Architecture::gemma3 && rope == "linear")) {
    refuse("with rope scaling '" + rope +
           "' (config.json) is not exported yet; Llama 3's llama3, linear on Llama and Mistral, and Gemma 3's "
           "linear are");
  }
  switch (mc.arch) {
    case Architecture::llama:
    case Architecture::mistral:
    case Architecture::mixtral:
      return {mc, "llama"};
    case Architecture::qwen2:
    case Architecture::qwen3:
      return {mc, model::architecture_name(mc.arch)};
    case Architecture::qwen3_moe:
      for (const bool sparse : mc.moe->sparse) {
        if (!sparse) {
          refuse(
              "with dense layers (mlp_only_layers, decoder_sparse_step) has no GGUF form: llama.cpp's qwen3moe "
              "has experts on every layer");
        }
      }
      if (!mc.moe->norm_topk_prob) {
        refuse("with norm_topk_prob false has no GGUF form: llama.cpp's qwen3moe renormalises the top-k weights");
      }
      return {mc, "qwen3moe"};
    case Architecture::gemma2:
    case Architecture::gemma3: {
      // llama.cpp does not read which layers slide: Gemma 2's even layers, Gemma 3's five in six.
      const int64_t period = mc.arch == Architecture::gemma2 ? 2 : 6;
      for (int64_t i = 0; i < mc.num_layers; ++i) {
        if (mc.sliding_window.at(i).has_value() != (i % period < period - 1)) {
          refuse("with layer " + std::to_string(i) + (mc.sliding_window[i] ? " sliding" : " full") +
                 " has no GGUF form: llama.cpp makes " +
                 (period == 2 ? "every second layer full" : "every sixth layer full") +
                 " and the others sliding, whatever layer_types says");
        }
      }
      const double scalar = mc.query_pre_attn_scalar.value_or(static_cast<double>(mc.head_dim));
      if (scalar != static_cast<double>(mc.head_dim) && scalar != static_cast<double>(mc.hidden_size / mc.num_heads)) {
        refuse("with query_pre_attn_scalar " + std::to_string(static_cast<int64_t>(scalar)) +
               ", which is neither head_dim nor hidden_size / num_attention_heads: llama.cpp derives the attention "
               "scale from the model's size and uses only those two");
      }
      return {mc, mc.arch == Architecture::gemma2 ? "gemma2" : "gemma3"};
    }
    case Architecture::gemma4:
      break;
  }
  refuse("is not exported");
  return {mc, ""};
}

std::optional<std::string> GgufArchitecture::tensor_name(const std::string& name) const {
  const std::string& prefix = mc_.weight_prefix;
  if (name == prefix + "embed_tokens.weight") return "token_embd.weight";
  if (name == prefix + "norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  const std::string layers = prefix + "layers.";
  if (name.rfind(layers, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', layers.size());
  const std::string index = name.substr(layers.size(), dot - layers.size());
  const std::string part = name.substr(dot + 1);
  const int64_t layer = std::stoll(index);
  if (layer >= mc_.num_layers) return std::nullopt;
  for (const auto& t : model::layer_tensors(mc_, layer)) {
    if (t.gguf.empty()) continue;
    if (part == t.module + ".weight") return "blk." + index + "." + t.gguf + ".weight";
    if (part == t.module + ".bias") return "blk." + index + "." + t.gguf + ".bias";
  }
  for (const auto& [hf, gguf] : kSparseParts) {
    if (part == hf) return "blk." + index + "." + gguf;
  }
  return std::nullopt;
}

at::Tensor GgufArchitecture::converted(const std::string& name, const at::Tensor& t) const {
  if (mc_.gemma && name.ends_with("norm.weight")) return t + 1;
  if (name_ != "llama") return t;
  if (name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias")) return permute_rows(t, mc_.num_heads);
  if (name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias")) return permute_rows(t, mc_.num_kv_heads);
  return t;
}

void GgufArchitecture::add_keys(io::GgufWriter& w) const {
  const auto u32 = [&w, this](const std::string& key, int64_t v) {
    w.add_uint32(name_ + "." + key, static_cast<uint32_t>(v));
  };
  const auto f32 = [&w, this](const std::string& key, double v) {
    w.add_float32(name_ + "." + key, static_cast<float>(v));
  };
  // Linear rope scaling as the converter writes it (Gemma 3's and LlamaModel's): positions divided
  // by the factor, as transformers' linear rope.
  const auto linear_rope = [&] {
    if (mc_.rope_scaling.type != "linear") return;
    w.add_string(name_ + ".rope.scaling.type", "linear");
    f32("rope.scaling.factor", mc_.rope_scaling.factor);
  };
  u32("context_length", mc_.max_position_embeddings);
  u32("embedding_length", mc_.hidden_size);
  u32("feed_forward_length", mc_.intermediate_size);
  u32("block_count", mc_.num_layers);
  u32("attention.head_count", mc_.num_heads);
  u32("attention.head_count_kv", mc_.num_kv_heads);
  f32("attention.layer_norm_rms_epsilon", mc_.rms_norm_eps);
  if (mc_.gemma) {
    u32("attention.key_length", mc_.head_dim);
    u32("attention.value_length", mc_.head_dim);
    if (const int64_t window = sliding_window(mc_)) u32("attention.sliding_window", window);
    if (mc_.arch == Architecture::gemma2) {
      f32("attn_logit_softcapping", mc_.attn_logit_softcap.value_or(0.0));
      f32("final_logit_softcapping", mc_.final_logit_softcap.value_or(0.0));
    } else {
      f32("rope.freq_base", mc_.rope_theta);
      f32("rope.freq_base_swa", mc_.sliding_rope ? mc_.sliding_rope->theta : mc_.rope_theta);
      if (mc_.final_logit_softcap) f32("final_logit_softcapping", *mc_.final_logit_softcap);
      linear_rope();
    }
    return;
  }
  f32("rope.freq_base", mc_.rope_theta);
  // Qwen3-MoE's converter (the generic one) writes head_dim, which its config.json always has,
  // and neither vocab_size nor the rope's dimension count.
  const bool qwen3moe = mc_.arch == Architecture::qwen3_moe;
  if (!qwen3moe) {
    u32("vocab_size", mc_.vocab_size);
    u32("rope.dimension_count", mc_.head_dim);
  }
  if (name_ == "llama") linear_rope();
  if (qwen3moe || mc_.head_dim * mc_.num_heads != mc_.hidden_size) {
    u32("attention.key_length", mc_.head_dim);
    u32("attention.value_length", mc_.head_dim);
  }
  if (mc_.moe) {
    u32("expert_count", mc_.moe->num_experts);
    u32("expert_used_count", mc_.moe->top_k);
    if (mc_.arch == Architecture::qwen3_moe) u32("expert_feed_forward_length", mc_.moe->expert_intermediate_size);
  }
}

}  // namespace qtrain::engine::train
