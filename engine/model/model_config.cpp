// See model_config.h.
#include "engine/model/model_config.h"

#include <c10/util/Exception.h>

namespace qtrain::engine::model {
namespace {

template <typename T>
T required(const nlohmann::json& j, const char* key, const std::string& source) {
  TORCH_CHECK(j.contains(key) && !j.at(key).is_null(),
              source,
              ": '",
              key,
              "' is missing; a Hugging Face config.json of a decoder model has it");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, source, ": '", key, "' has the wrong type (", j.at(key).dump(), "): ", e.what());
  }
}

template <typename T>
T optional_or(const nlohmann::json& j, const char* key, T fallback) {
  return j.contains(key) && !j.at(key).is_null() ? j.at(key).get<T>() : fallback;
}

void read_rope(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  // transformers v5: rope_parameters {rope_type, rope_theta, factor, ...}; v4: rope_theta and
  // rope_scaling {type | rope_type, ...}.
  nlohmann::json params = nlohmann::json::object();
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    params = j.at("rope_parameters");
    TORCH_CHECK(!params.contains("full_attention") && !params.contains("sliding_attention"),
                source,
                ": per-layer-type rope_parameters are not supported for this architecture");
  } else if (j.contains("rope_scaling") && j.at("rope_scaling").is_object()) {
    params = j.at("rope_scaling");
  }
  c.rope_theta = optional_or<double>(params, "rope_theta", optional_or<double>(j, "rope_theta", 10000.0));
  std::string type = optional_or<std::string>(params, "rope_type", optional_or<std::string>(params, "type", "default"));
  c.rope_scaling.type = type;
  c.rope_scaling.factor = optional_or<double>(params, "factor", 1.0);
  c.rope_scaling.low_freq_factor = optional_or<double>(params, "low_freq_factor", 1.0);
  c.rope_scaling.high_freq_factor = optional_or<double>(params, "high_freq_factor", 4.0);
  c.rope_scaling.original_max_position_embeddings =
      optional_or<int64_t>(params, "original_max_position_embeddings", 8192);
  TORCH_CHECK(type == "default" || type == "linear" || type == "llama3",
              source,
              ": rope type '",
              type,
              "' is not supported; supported: default, linear, llama3");
  TORCH_CHECK(
      optional_or<double>(params, "partial_rotary_factor", optional_or<double>(j, "partial_rotary_factor", 1.0)) == 1.0,
      source,
      ": partial_rotary_factor other than 1.0 is not supported");
}

}  // namespace

std::string architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::llama:
      return "llama";
    case Architecture::mistral:
      return "mistral";
    case Architecture::qwen2:
      return "qwen2";
    case Architecture::qwen3:
      return "qwen3";
  }
  return "?";
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  TORCH_CHECK(j.is_object(), source, ": config.json must hold a JSON object");
  ModelConfig c;
  c.raw = j;
  const auto type = required<std::string>(j, "model_type", source);
  if (type == "llama") {
    c.arch = Architecture::llama;
  } else if (type == "mistral") {
    c.arch = Architecture::mistral;
  } else if (type == "qwen2") {
    c.arch = Architecture::qwen2;
  } else if (type == "qwen3") {
    c.arch = Architecture::qwen3;
  } else {
    TORCH_CHECK(false, source, ": model_type '", type, "' is not supported; supported: llama, mistral, qwen2, qwen3");
  }
  c.vocab_size = required<int64_t>(j, "vocab_size", source);
  c.hidden_size = required<int64_t>(j, "hidden_size", source);
  c.intermediate_size = required<int64_t>(j, "intermediate_size", source);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", source);
  c.num_heads = required<int64_t>(j, "num_attention_heads", source);
  c.num_kv_heads = optional_or<int64_t>(j, "num_key_value_heads", c.num_heads);
  c.head_dim = optional_or<int64_t>(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position_embeddings = optional_or<int64_t>(j, "max_position_embeddings", 2048);
  c.rms_norm_eps = optional_or<double>(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = optional_or<bool>(j, "tie_word_embeddings", false);
  const bool attention_bias = optional_or<bool>(j, "attention_bias", false);
  c.qkv_bias = c.arch == Architecture::qwen2 || attention_bias;
  c.o_bias = c.arch != Architecture::qwen2 && attention_bias;
  c.mlp_bias = optional_or<bool>(j, "mlp_bias", false);
  c.qk_norm = c.arch == Architecture::qwen3;
  const auto act = optional_or<std::string>(j, "hidden_act", "silu");
  TORCH_CHECK(act == "silu", source, ": hidden_act '", act, "' is not supported for ", type, "; expected silu");
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size},
                         {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_layers},
                         {"num_attention_heads", c.num_heads},
                         {"num_key_value_heads", c.num_kv_heads},
                         {"head_dim", c.head_dim}}) {
    TORCH_CHECK(v > 0, source, ": ", name, " must be positive, got ", v);
  }
  TORCH_CHECK(c.num_heads % c.num_kv_heads == 0,
              source,
              ": num_attention_heads ",
              c.num_heads,
              " is not a multiple of num_key_value_heads ",
              c.num_kv_heads);
  TORCH_CHECK(c.head_dim % 2 == 0, source, ": head_dim ", c.head_dim, " must be even for rotary embeddings");
  read_rope(c, j, source);

  // Sliding windows: Mistral on every layer when sliding_window is set; Qwen2/3 only with
  // use_sliding_window, on layers >= max_window_layers; layer_types wins where present.
  c.sliding_window.assign(c.num_layers, std::nullopt);
  const auto window = optional_or<int64_t>(j, "sliding_window", 0);
  if (j.contains("layer_types") && j.at("layer_types").is_array()) {
    const auto& types = j.at("layer_types");
    TORCH_CHECK(static_cast<int64_t>(types.size()) == c.num_layers,
                source,
                ": layer_types has ",
                types.size(),
                " entries for ",
                c.num_layers,
                " layers");
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const auto t = types[i].get<std::string>();
      TORCH_CHECK(t == "full_attention" || t == "sliding_attention",
                  source,
                  ": layer_types[",
                  i,
                  "] = '",
                  t,
                  "' is not supported");
      if (t == "sliding_attention") {
        TORCH_CHECK(window > 0, source, ": layer ", i, " is sliding_attention but sliding_window is not set");
        c.sliding_window[i] = window;
      }
    }
  } else if (window > 0) {
    const bool qwen = c.arch == Architecture::qwen2 || c.arch == Architecture::qwen3;
    const bool on = !qwen || optional_or<bool>(j, "use_sliding_window", false);
    const int64_t first = qwen ? optional_or<int64_t>(j, "max_window_layers", c.num_layers) : 0;
    for (int64_t i = first; on && i < c.num_layers; ++i) c.sliding_window[i] = window;
  }
  return c;
}

nlohmann::json ModelConfig::to_json() const {
  if (!raw.is_null() && !raw.empty()) return raw;
  static const char* classes[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
  nlohmann::json j;
  j["architectures"] = {classes[static_cast<int>(arch)]};
  j["model_type"] = architecture_name(arch);
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = arch == Architecture::qwen2 ? false : o_bias;
  j["mlp_bias"] = mlp_bias;
  nlohmann::json rope = {{"rope_theta", rope_theta}, {"rope_type", rope_scaling.type}};
  if (rope_scaling.type != "default") rope["factor"] = rope_scaling.factor;
  if (rope_scaling.type == "llama3") {
    rope["low_freq_factor"] = rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = rope_scaling.high_freq_factor;
    rope["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
  }
  j["rope_parameters"] = rope;
  const auto window = sliding_window.empty() ? std::nullopt : sliding_window.back();
  j["sliding_window"] = window ? nlohmann::json(*window) : nlohmann::json(nullptr);
  if (window && arch != Architecture::mistral) {
    j["use_sliding_window"] = true;
    int64_t first = num_layers;
    for (int64_t i = num_layers - 1; i >= 0 && sliding_window[i]; --i) first = i;
    j["max_window_layers"] = first;
  }
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  j["dtype"] = "float32";
  return j;
}

}  // namespace qtrain::engine::model
