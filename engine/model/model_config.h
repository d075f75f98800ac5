// A decoder model's shape and conventions, read from a Hugging Face config.json. Normalises the
// differences between transformers v4 and v5 files (rope_theta/rope_scaling vs rope_parameters,
// missing head_dim or num_key_value_heads) and between families (Mistral's window, Qwen3's q/k
// norms, Gemma's norms, soft-caps and per-layer-type rope, Gemma 4's per-layer attention shapes),
// as transformers' configuration classes read them. Mixture-of-experts families (Qwen3-MoE,
// Mixtral) add a MoeConfig.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/nn/rope.h"

namespace qtrain::engine::model {

// gemma3 is the text decoder of Gemma 3 (model_type gemma3_text, Gemma3ForCausalLM), also read
// from the text_config of a multimodal gemma3 (Gemma3ForConditionalGeneration) folder; gemma4
// likewise (gemma4_text, Gemma4ForCausalLM; gemma4, Gemma4ForConditionalGeneration).
enum class Architecture { llama, mistral, qwen2, qwen3, gemma2, gemma3, gemma4, qwen3_moe, mixtral };

// The model_type transformers writes: llama, mistral, qwen2, qwen3, gemma2, gemma3_text,
// gemma4_text, qwen3_moe, mixtral.
std::string architecture_name(Architecture arch);

enum class Activation { silu, gelu_tanh };  // the MLP's gate: SwiGLU or Gemma's GeGLU (tanh GELU)

// Rotary frequencies of one kind of layer.
struct RopeParams {
  double theta = 10000.0;
  ops::RopeScaling scaling;
};

// One layer's attention shape. Gemma 4's full-attention layers differ from its sliding ones:
// global_head_dim wide heads, their own kv head count, and with attention_k_eq_v no v_proj.
struct LayerAttention {
  int64_t head_dim = 0;
  int64_t num_kv_heads = 0;
  bool k_eq_v = false;  // values are the raw k_proj output (See Note [Gemma 4 decoder] in decoder_layer.h)
  bool operator==(const LayerAttention&) const = default;
};

// The routed expert block of Qwen3-MoE and Mixtral (see Note [Top-k routing] in
// engine/model/moe_router.h) and of Gemma 4 (Note [Gemma 4 router] in
// engine/model/gemma4_router.h, Note [Gemma 4 decoder]). Field names follow transformers'
// Qwen3MoeConfig; Mixtral's num_local_experts and intermediate_size (its experts' width) and
// Gemma 4's top_k_experts are read into the same fields.
struct MoeConfig {
  int64_t num_experts = 0;               // E (num_experts / num_local_experts)
  int64_t top_k = 0;                     // K (num_experts_per_tok)
  int64_t expert_intermediate_size = 0;  // I of each expert (moe_intermediate_size; Mixtral: intermediate_size)
  bool norm_topk_prob = false;           // renormalise the K probabilities (Mixtral: always)
  bool fp32_routing_weights = false;     // Mixtral keeps them fp32; Qwen casts them to the compute dtype
  bool output_router_logits = false;     // HF adds the load-balancing loss only when this is set
  double router_aux_loss_coef = 0.001;
  std::vector<bool> sparse;  // per layer: routed experts (true) or the dense MLP (decoder_sparse_step, mlp_only_layers)
  // Gemma 4: every layer keeps its dense MLP and adds the experts beside it, and the block sits
  // at layers.N.router / layers.N.experts instead of layers.N.mlp.
  bool dense_mlp_too = false;
  // The experts' module path after "layers.N." (transformers' names, also PEFT's
  // target_parameters prefix): "mlp.experts", Gemma 4 "experts".
  std::string experts_path = "mlp.experts";
  // The router's module path after "layers.N.": "mlp.gate" (Qwen3MoeTopKRouter, MixtralTopKRouter:
  // a module holding the parameter weight [E, H], which LoRA adapts through target_parameters as
  // "mlp.gate.weight"), Gemma 4 "router.proj" (an nn.Linear, adapted through target_modules).
  std::string router_path = "mlp.gate";
  bool router_is_linear = false;
};

// Gemma 4's expert block (enable_moe_block) on every one of `num_layers` layers: `num_experts`
// experts of width `intermediate`, `top_k` per token, beside the dense MLP.
MoeConfig gemma4_moe_config(int64_t num_layers, int64_t num_experts, int64_t top_k, int64_t intermediate);

struct ModelConfig {
  Architecture arch = Architecture::llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // Per layer where layers differ (Gemma 4); empty: every layer has head_dim and num_kv_heads.
  std::vector<LayerAttention> layer_attention;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // The std of transformers' _init_weights (normal); new embedding rows start there (Note
  // [Resized embeddings] in engine/model/resize_embeddings.h). The outer config's in a
  // multimodal folder.
  double initializer_range = 0.02;
  bool qkv_bias = false;  // Qwen2 (always), Llama/Qwen3 with attention_bias
  bool o_bias = false;    // attention_bias on families that put it on o_proj too
  bool mlp_bias = false;
  bool qk_norm = false;                                // Qwen3, Gemma 3: RMSNorm over head_dim on q and k before RoPE
  std::vector<std::optional<int64_t>> sliding_window;  // per layer; nullopt = full attention
  // Gemma 2 and 3 (see Note [Gemma decoder] in decoder_layer.h): (1 + w) RMSNorms, four per
  // layer, embeddings times sqrt(hidden_size), GeGLU, attention scaled by
  // query_pre_attn_scalar^-0.5 and optionally soft-capped (Gemma 2), and final logits soft-capped.
  bool gemma = false;
  Activation hidden_act = Activation::silu;
  std::optional<double> query_pre_attn_scalar;  // attention scale = this^-0.5 (default head_dim^-0.5)
  std::optional<double> attn_logit_softcap;     // Gemma 2 (50)
  std::optional<double> final_logit_softcap;    // Gemma 2 (30)
  std::optional<RopeParams> sliding_rope;       // Gemma 3 and 4: sliding layers' rope
  // Gemma 4 (See Note [Gemma 4 decoder]) has besides the Gemma conventions plain-w norms, a
  // weightless v norm, attention scale 1, a layer_scalar per layer and per-layer shapes (above).
  // The decoder's tensor names start with this: "model." (…ForCausalLM), or
  // "model.language_model." for a multimodal Gemma 3 or 4 (see Note [Multimodal Gemma 3 tensor
  // names] in causal_lm.cpp for how a Gemma 3 checkpoint spells them; Gemma 4's spells them so).
  std::string weight_prefix = "model.";
  std::optional<MoeConfig> moe;  // Qwen3-MoE, Mixtral, Gemma 4 with enable_moe_block
  nlohmann::json raw;            // the file as read, for writing it back unchanged

  LayerAttention attention(int64_t layer) const {
    return layer_attention.empty() ? LayerAttention{head_dim, num_kv_heads, false} : layer_attention.at(layer);
  }

  // The head_dim the rope of one kind of layer rotates (Gemma 4: the full layers' is wider).
  int64_t rope_head_dim(bool sliding) const;

  // `source` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // A config.json transformers loads (model_type, architectures, all fields above).
  nlohmann::json to_json() const;

  // Whether layer i holds routed experts (instead of the dense MLP, or on Gemma 4 beside it).
  bool layer_is_sparse(int64_t i) const { return moe && moe->sparse.at(i); }
  // Whether layer i has the dense MLP (gate_proj, up_proj, down_proj).
  bool layer_has_dense_mlp(int64_t i) const { return !layer_is_sparse(i) || moe->dense_mlp_too; }
};

}  // namespace qtrain::engine::model
