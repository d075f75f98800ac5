// How llama.cpp's converter (convert_hf_to_gguf.py) writes each architecture qtrain exports: its
// GGUF architecture, its keys, the GGUF name of each of its tensors and what the converter does
// to a tensor's values. See Note [GGUF architectures].
//
// Note [GGUF architectures]
// A decoder layer's norms and linears take the GGUF names of Note [Layer tensors]
// (engine/model/layer_tensors.h: "blk.N.<name>"), a sparse layer's router and experts those
// below (gguf_architecture.cpp); token_embd, output_norm and output are the model's embeddings,
// final norm and head. The same transformers name can mean two things: Llama's post_attention_layernorm is the norm
// before the MLP (ffn_norm), Gemma's is the one after attention (post_attention_norm, with pre_feedforward_layernorm as
// ffn_norm).
// - llama (Llama, Mistral, Mixtral), qwen2, qwen3, qwen3moe: attn_norm, attn_q, attn_k, attn_v,
//   attn_output (with .bias where the model has them), attn_q_norm, attn_k_norm (Qwen3),
//   ffn_norm, and the MLP: ffn_gate, ffn_up, ffn_down, or on a sparse layer the router
//   ffn_gate_inp [E, H] and the experts stacked, ffn_gate_exps and ffn_up_exps [E, I, H] and
//   ffn_down_exps [E, H, I] (numpy order). "llama" permutes q's and k's rows from transformers'
//   rotate-half layout to ggml's interleaved pairs (LlamaModel.permute).
// - gemma2, gemma3: attn_norm, attn_q, attn_k, attn_v, attn_output, post_attention_norm,
//   ffn_norm (pre_feedforward_layernorm), post_ffw_norm, ffn_gate, ffn_up, ffn_down,
//   attn_q_norm and attn_k_norm (Gemma 3); every norm weight w is written as 1 + w (transformers'
//   Gemma norms scale by 1 + w, ggml's by the weight); no output tensor (tied embeddings).
// Keys: context_length, embedding_length, feed_forward_length, block_count,
// attention.head_count, head_count_kv, layer_norm_rms_epsilon, and
// - llama, qwen2, qwen3, qwen3moe: rope.freq_base, rope.dimension_count, vocab_size,
//   key_length / value_length where head_dim is not hidden / heads; with experts expert_count,
//   expert_used_count, and qwen3moe's expert_feed_forward_length (the experts' width).
// - gemma2: key_length, value_length, attn_logit_softcapping, final_logit_softcapping,
//   attention.sliding_window.
// - gemma3: key_length, value_length, rope.freq_base (the full layers'), attention.sliding_window,
//   and a linear rope_scaling's type and factor (full layers only).
// What llama.cpp cannot run the same way is refused: Qwen3-MoE with dense layers
// (mlp_only_layers, decoder_sparse_step; qwen3moe has experts on every layer) or
// norm_topk_prob false (llama.cpp renormalises), Gemma whose query_pre_attn_scalar is neither
// head_dim nor hidden / heads (llama.cpp derives the attention scale from the model's size, and
// these are the two it uses), Gemma 2 with its head untied (gemma2 has no output tensor).
// Gemma 4 is not exported yet.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/io/gguf_writer.h"
#include "engine/model/model_config.h"

namespace qtrain::engine::train {

class GgufArchitecture {
 public:
  // `mc`'s GGUF architecture, or an error naming what is not exported and why.
  static GgufArchitecture of(const model::ModelConfig& mc);

  const std::string& name() const { return name_; }
  // The GGUF name of a transformers tensor name (merged_tensor_makers' names, experts stacked);
  // nullopt: the converter writes no such tensor in the main file (a multimodal model's vision
  // tower goes to llama.cpp's separate mmproj file).
  std::optional<std::string> tensor_name(const std::string& name) const;
  // The values the converter writes for tensor `name` (q / k rows permuted, Gemma norms 1 + w).
  at::Tensor converted(const std::string& name, const at::Tensor& t) const;
  // The architecture's keys (Note [GGUF architectures]).
  void add_keys(io::GgufWriter& w) const;

 private:
  GgufArchitecture(const model::ModelConfig& mc, std::string name);

  model::ModelConfig mc_;
  std::string name_;
};

}  // namespace qtrain::engine::train
