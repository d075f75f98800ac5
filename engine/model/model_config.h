// A decoder model's shape and conventions, read from a Hugging Face config.json. Normalises the
// differences between transformers v4 and v5 files (rope_theta/rope_scaling vs rope_parameters,
// missing head_dim or num_key_value_heads) and between families (Mistral's window, Qwen3's q/k
// norms), as transformers' configuration classes read them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/nn/rope.h"

namespace qtrain::engine::model {

enum class Architecture { llama, mistral, qwen2, qwen3 };

std::string architecture_name(Architecture arch);

struct ModelConfig {
  Architecture arch = Architecture::llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2 (always), Llama/Qwen3 with attention_bias
  bool o_bias = false;    // attention_bias on families that put it on o_proj too
  bool mlp_bias = false;
  bool qk_norm = false;                                // Qwen3: RMSNorm over head_dim on q and k before RoPE
  std::vector<std::optional<int64_t>> sliding_window;  // per layer; nullopt = full attention
  nlohmann::json raw;                                  // the file as read, for writing it back unchanged

  // `source` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // A config.json transformers loads (model_type, architectures, all fields above).
  nlohmann::json to_json() const;
};

}  // namespace qtrain::engine::model
