// See model_config.h.
#include "engine/model/model_config.h"

#include <cmath>
#include <type_traits>

#include <c10/util/Exception.h>

namespace qtrain::engine::model {
namespace {

// An integer key takes only a JSON integer: nlohmann converts a float such as 1e65 to int64_t
// with undefined behaviour (found by fuzz/model_config_fuzz), and a fraction would be dropped.
void check_whole_number(const nlohmann::json& v, const char* key, const std::string& source) {
  TORCH_CHECK(v.is_number_integer(),
              source,
              ": '",
              key,
              "' must be a whole number, got ",
              v.is_number() ? v.dump() : std::string("a ") + v.type_name());
}

template <typename T>
T required(const nlohmann::json& j, const char* key, const std::string& source) {
  TORCH_CHECK(j.contains(key) && !j.at(key).is_null(),
              source,
              ": '",
              key,
              "' is missing; a Hugging Face config.json of a decoder model has it");
  if constexpr (std::is_same_v<T, int64_t>) check_whole_number(j.at(key), key, source);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, source, ": '", key, "' has the wrong type (", j.at(key).dump(), "): ", e.what());
  }
}

template <typename T>
T optional_or(const nlohmann::json& j, const char* key, T fallback) {
  static_assert(!std::is_integral_v<T> || std::is_same_v<T, bool>, "integers: optional_integer");
  return j.contains(key) && !j.at(key).is_null() ? j.at(key).get<T>() : fallback;
}

int64_t optional_integer(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  check_whole_number(j.at(key), key, source);
  return j.at(key).get<int64_t>();
}

// The shape keys are counts: transformers fails on a fraction (range(1.9) raises), and reading one
// as an integer would silently drop its fraction (num_hidden_layers: 1.9 would train one layer).
void check_integer_keys(const nlohmann::json& j, const std::string& source) {
  for (const char* key : {"vocab_size",
                          "hidden_size",
                          "intermediate_size",
                          "num_hidden_layers",
                          "num_attention_heads",
                          "num_key_value_heads",
                          "head_dim",
                          "max_position_embeddings",
                          "sliding_window",
                          "num_experts",
                          "num_local_experts",
                          "num_experts_per_tok",
                          "moe_intermediate_size",
                          "decoder_sparse_step"}) {
    if (j.contains(key) && !j.at(key).is_null()) check_whole_number(j.at(key), key, source);
  }
}

// One rope dict ({rope_type | type, rope_theta, factor, ...}); `theta` where it has none.
RopeParams read_rope_params(const nlohmann::json& params,
                            const nlohmann::json& j,
                            double theta,
                            const std::string& source) {
  RopeParams r;
  r.theta = optional_or<double>(params, "rope_theta", theta);
  TORCH_CHECK(std::isfinite(r.theta) && r.theta > 0,
              source,
              ": rope_theta must be positive (1e4 to 1e6 in released models), got ",
              r.theta);
  std::string type = optional_or<std::string>(params, "rope_type", optional_or<std::string>(params, "type", "default"));
  r.scaling.type = type;
  r.scaling.factor = optional_or<double>(params, "factor", 1.0);
  r.scaling.low_freq_factor = optional_or<double>(params, "low_freq_factor", 1.0);
  r.scaling.high_freq_factor = optional_or<double>(params, "high_freq_factor", 4.0);
  r.scaling.original_max_position_embeddings =
      optional_integer(params, "original_max_position_embeddings", 8192, source);
  TORCH_CHECK(type == "default" || type == "linear" || type == "llama3" || type == "proportional",
              source,
              ": rope type '",
              type,
              "' is not supported; supported: default, linear, llama3, proportional");
  if (type == "proportional") {
    // Its own partial_rotary_factor only (_compute_proportional_rope_parameters).
    r.scaling.partial_rotary_factor = optional_or<double>(params, "partial_rotary_factor", 1.0);
    TORCH_CHECK(r.scaling.partial_rotary_factor > 0 && r.scaling.partial_rotary_factor <= 1,
                source,
                ": partial_rotary_factor must be in (0, 1], got ",
                r.scaling.partial_rotary_factor);
  } else {
    TORCH_CHECK(optional_or<double>(
                    params, "partial_rotary_factor", optional_or<double>(j, "partial_rotary_factor", 1.0)) == 1.0,
                source,
                ": partial_rotary_factor other than 1.0 is not supported for rope type '",
                type,
                "'");
  }
  return r;
}

void read_rope(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  // transformers v5: rope_parameters {rope_type, rope_theta, factor, ...}; v4: rope_theta and
  // rope_scaling {type | rope_type, ...}.
  nlohmann::json params = nlohmann::json::object();
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    params = j.at("rope_parameters");
    TORCH_CHECK(!params.contains("full_attention") && !params.contains("sliding_attention"),
                source,
                ": per-layer-type rope_parameters are not supported for ",
                architecture_name(c.arch));
  } else if (j.contains("rope_scaling") && j.at("rope_scaling").is_object()) {
    params = j.at("rope_scaling");
  }
  const auto r = read_rope_params(params, j, optional_or<double>(j, "rope_theta", 10000.0), source);
  c.rope_theta = r.theta;
  c.rope_scaling = r.scaling;
}

// Gemma 3 (Gemma3TextConfig.convert_rope_params_to_dict): full-attention layers use
// rope_parameters.full_attention (v5) or rope_theta (default 1e6) with rope_scaling (v4);
// sliding layers rope_parameters.sliding_attention or rope_local_base_freq (default 1e4), unscaled.
void read_gemma3_rope(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  nlohmann::json full = nlohmann::json::object(), sliding = nlohmann::json::object();
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    const auto& params = j.at("rope_parameters");
    TORCH_CHECK(params.contains("full_attention") || params.contains("sliding_attention"),
                source,
                ": rope_parameters of a Gemma 3 config must be per layer type ({\"full_attention\": {...}, ",
                "\"sliding_attention\": {...}}), got ",
                params.dump());
    if (params.contains("full_attention") && params.at("full_attention").is_object())
      full = params.at("full_attention");
    if (params.contains("sliding_attention") && params.at("sliding_attention").is_object()) {
      sliding = params.at("sliding_attention");
    }
  } else if (j.contains("rope_scaling") && j.at("rope_scaling").is_object()) {
    full = j.at("rope_scaling");
  }
  const auto global = read_rope_params(full, j, optional_or<double>(j, "rope_theta", 1e6), source);
  c.rope_theta = global.theta;
  c.rope_scaling = global.scaling;
  c.sliding_rope = read_rope_params(sliding, j, optional_or<double>(j, "rope_local_base_freq", 1e4), source);
}

// transformers' Gemma2Config / Gemma3TextConfig defaults for the keys a file leaves out (Hub
// Gemma 3 text_configs hold only a few keys).
nlohmann::json gemma_defaults(Architecture arch) {
  if (arch == Architecture::gemma4) {
    // Gemma4TextConfig. hidden_size_per_layer_input defaults to 256 (per-layer embeddings), which
    // the 26B-A4B's file sets to 0 explicitly; global_head_dim is read where it is used.
    return {{"vocab_size", 262144},
            {"hidden_size", 2304},
            {"intermediate_size", 9216},
            {"num_hidden_layers", 30},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-6},
            {"sliding_window", 512},
            {"final_logit_softcapping", nullptr},
            {"hidden_size_per_layer_input", 256},
            {"num_kv_shared_layers", 0},
            {"attention_k_eq_v", false},
            {"enable_moe_block", false}};
  }
  const bool g2 = arch == Architecture::gemma2;
  return {{"vocab_size", g2 ? 256000 : 262208},
          {"hidden_size", 2304},
          {"intermediate_size", 9216},
          {"num_hidden_layers", 26},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 4},
          {"head_dim", 256},
          {"max_position_embeddings", g2 ? 8192 : 131072},
          {"rms_norm_eps", 1e-6},
          {"query_pre_attn_scalar", 256},
          {"sliding_window", 4096},
          {"final_logit_softcapping", g2 ? nlohmann::json(30.0) : nlohmann::json(nullptr)},
          {"attn_logit_softcapping", g2 ? nlohmann::json(50.0) : nlohmann::json(nullptr)}};
}

// Without layer_types: Gemma 2 alternates (even layers sliding), Gemma 3 makes every
// sliding_window_pattern-th layer (default 6) full and the others sliding, Gemma 4 every 6th.
nlohmann::json gemma_layer_types(const ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  const int64_t pattern = c.arch == Architecture::gemma2   ? 2
                          : c.arch == Architecture::gemma4 ? 6
                                                           : optional_integer(j, "sliding_window_pattern", 6, source);
  TORCH_CHECK(pattern > 0,
              source,
              ": sliding_window_pattern must be a positive whole number (every pattern-th layer attends to the "
              "whole sequence; released Gemma 3 models use 6), got ",
              pattern);
  auto types = nlohmann::json::array();
  for (int64_t i = 0; i < c.num_layers; ++i)
    types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
  return types;
}

// The Gemma fields of `j` (already completed with gemma_defaults). attn_logit_softcapping is read
// for Gemma 2 only: Gemma3Attention never passes it to the attention.
void read_gemma(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  const auto act = optional_or<std::string>(j, "hidden_activation", "gelu_pytorch_tanh");
  TORCH_CHECK(act == "gelu_pytorch_tanh",
              source,
              ": hidden_activation '",
              act,
              "' is not supported for ",
              architecture_name(c.arch),
              "; expected gelu_pytorch_tanh");
  c.hidden_act = Activation::gelu_tanh;
  auto softcap = [&](const char* key) -> std::optional<double> {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    const auto v = j.at(key).get<double>();
    TORCH_CHECK(v > 0, source, ": ", key, " must be positive or null, got ", v);
    return v;
  };
  c.final_logit_softcap = softcap("final_logit_softcapping");
  if (c.arch == Architecture::gemma4) {
    // "vision" makes image tokens see each other; text stays causal.
    const auto bidirectional = j.value("use_bidirectional_attention", nlohmann::json(nullptr));
    TORCH_CHECK(bidirectional.is_null() || bidirectional == "vision",
                source,
                ": use_bidirectional_attention ",
                bidirectional.dump(),
                " is not supported; qtrain trains causal decoders (set it to null)");
    return;
  }
  TORCH_CHECK(!optional_or<bool>(j, "use_bidirectional_attention", false),
              source,
              ": use_bidirectional_attention is not supported; qtrain trains causal decoders (set it to false)");
  c.query_pre_attn_scalar = optional_or<double>(j, "query_pre_attn_scalar", 256.0);
  TORCH_CHECK(*c.query_pre_attn_scalar == std::round(*c.query_pre_attn_scalar),
              source,
              ": query_pre_attn_scalar must be a whole number (transformers reads an int), got ",
              *c.query_pre_attn_scalar);
  TORCH_CHECK(
      *c.query_pre_attn_scalar > 0, source, ": query_pre_attn_scalar must be positive, got ", *c.query_pre_attn_scalar);
  if (c.arch == Architecture::gemma2) c.attn_logit_softcap = softcap("attn_logit_softcapping");
}

// What Gemma 4 has that qtrain does not train yet, refused by name (Gemma4TextConfig's keys: `j`
// with gemma_defaults filled in, `file` as written).
void check_gemma4_supported(const nlohmann::json& j, const nlohmann::json& file, const std::string& source) {
  const auto ple = optional_integer(j, "hidden_size_per_layer_input", 0, source);
  TORCH_CHECK(ple == 0,
              source,
              ": hidden_size_per_layer_input is ",
              ple,
              (file.contains("hidden_size_per_layer_input") ? "" : " (transformers' default when the key is missing)"),
              ": per-layer embeddings (Gemma 4 E2B/E4B) are not supported. A checkpoint without "
              "embed_tokens_per_layer (26B-A4B, 31B) says hidden_size_per_layer_input: 0");
  const auto shared = optional_integer(j, "num_kv_shared_layers", 0, source);
  TORCH_CHECK(shared == 0,
              source,
              ": num_kv_shared_layers is ",
              shared,
              ": layers that reuse another layer's keys and values (Gemma 4 E2B/E4B) are not supported");
}

// Gemma 4's rope per layer type (Gemma4TextRotaryEmbedding): rope_parameters.{sliding_attention,
// full_attention}, by default the 26B-A4B's (sliding: default, theta 1e4; full: proportional with
// partial_rotary_factor 0.25, theta 1e6). The full layers' rope is rope_theta / rope_scaling.
void read_gemma4_rope(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  nlohmann::json params = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}},
      {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}};
  if (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) params = j.at("rope_parameters");
  auto kind = [&](const char* type, double theta) {
    TORCH_CHECK(params.is_object() && params.contains(type) && params.at(type).is_object(),
                source,
                ": rope_parameters has no '",
                type,
                "' object; Gemma 4 needs one per layer type ({\"sliding_attention\": {...}, \"full_attention\": "
                "{...}}), got ",
                params.dump());
    return read_rope_params(params.at(type), j, theta, source);
  };
  const auto full = kind("full_attention", 1e6);
  c.rope_theta = full.theta;
  c.rope_scaling = full.scaling;
  c.sliding_rope = kind("sliding_attention", 1e4);
}

// Gemma 4's per-layer attention shapes, after the layer kinds are known. Two spellings: the Hub
// file's global_head_dim (default 512) for every full layer and, with attention_k_eq_v,
// num_global_key_value_heads; or what transformers 5 re-saves instead, per_layer_config
// {"05": {"head_dim": 512, "num_key_value_heads": 2}, ...} (Gemma4TextConfig.__post_init__).
// With attention_k_eq_v, full layers have no v_proj either way.
void read_gemma4_attention(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  const bool k_eq_v = optional_or<bool>(j, "attention_k_eq_v", false);
  std::vector<nlohmann::json> overrides(c.num_layers, nlohmann::json::object());
  if (j.contains("per_layer_config") && !j.at("per_layer_config").is_null()) {
    const auto& per_layer = j.at("per_layer_config");
    TORCH_CHECK(per_layer.is_object(), source, ": per_layer_config must be an object, got ", per_layer.dump());
    for (const auto& [key, value] : per_layer.items()) {
      const bool index = !key.empty() && key.size() < 10 && key.find_first_not_of("0123456789") == std::string::npos;
      TORCH_CHECK(index && std::stoll(key) < c.num_layers,
                  source,
                  ": per_layer_config key '",
                  key,
                  "' is not a layer index below num_hidden_layers ",
                  c.num_layers);
      TORCH_CHECK(value.is_object(), source, ": per_layer_config[\"", key, "\"] must be an object");
      for (const auto& [attr, v] : value.items()) {
        TORCH_CHECK(attr == "head_dim" || attr == "num_key_value_heads",
                    source,
                    ": per_layer_config[\"",
                    key,
                    "\"] sets '",
                    attr,
                    "'; qtrain supports per-layer head_dim and num_key_value_heads only");
        TORCH_CHECK(v.is_number_integer(), source, ": per_layer_config[\"", key, "\"].", attr, " must be an integer");
      }
      overrides[std::stoll(key)] = value;
    }
  } else {
    nlohmann::json full = {{"head_dim", optional_integer(j, "global_head_dim", 512, source)}};
    if (k_eq_v && j.contains("num_global_key_value_heads") && !j.at("num_global_key_value_heads").is_null()) {
      full["num_key_value_heads"] = j.at("num_global_key_value_heads");
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
      if (!c.sliding_window[i]) overrides[i] = full;
    }
  }
  c.layer_attention.clear();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool full = !c.sliding_window[i];
    LayerAttention a{optional_integer(overrides[i], "head_dim", c.head_dim, source),
                     optional_integer(overrides[i], "num_key_value_heads", c.num_kv_heads, source),
                     k_eq_v && full};
    TORCH_CHECK(a.head_dim > 0 && a.head_dim % 2 == 0,
                source,
                ": layer ",
                i,
                " has head_dim ",
                a.head_dim,
                "; it must be even and positive (global_head_dim or per_layer_config)");
    TORCH_CHECK(a.num_kv_heads > 0 && c.num_heads % a.num_kv_heads == 0,
                source,
                ": layer ",
                i,
                " has ",
                a.num_kv_heads,
                " key/value heads, not a divisor of num_attention_heads ",
                c.num_heads);
    // One rope table per layer kind, as transformers requires (_PerLayerConfigView by layer type).
    for (int64_t k = 0; k < i; ++k) {
      TORCH_CHECK(c.sliding_window[k].has_value() == full || c.layer_attention[k] == a,
                  source,
                  ": layers ",
                  k,
                  " and ",
                  i,
                  " are both ",
                  full ? "full" : "sliding",
                  "_attention but have different head_dim or num_key_value_heads; every layer of one kind must "
                  "have the same");
    }
    c.layer_attention.push_back(a);
  }
}

// Qwen3MoeConfig / MixtralConfig: the expert block's shape and routing, and which layers are
// sparse (Qwen3MoeDecoderLayer: i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0;
// Mixtral: every layer). Keys of related families that change the block's meaning are refused.
MoeConfig read_moe(const ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  MoeConfig m;
  const bool mixtral = c.arch == Architecture::mixtral;
  // transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (attribute_map).
  m.num_experts = j.contains("num_experts") && !j.at("num_experts").is_null()
                      ? j.at("num_experts").get<int64_t>()
                      : required<int64_t>(j, "num_local_experts", source);
  m.top_k = required<int64_t>(j, "num_experts_per_tok", source);
  m.expert_intermediate_size = mixtral ? c.intermediate_size : required<int64_t>(j, "moe_intermediate_size", source);
  m.norm_topk_prob = mixtral || optional_or<bool>(j, "norm_topk_prob", false);
  m.fp32_routing_weights = mixtral;
  m.output_router_logits = optional_or<bool>(j, "output_router_logits", false);
  m.router_aux_loss_coef = optional_or<double>(j, "router_aux_loss_coef", 0.001);
  TORCH_CHECK(m.num_experts > 0, source, ": the number of experts must be positive, got ", m.num_experts);
  TORCH_CHECK(m.top_k > 0 && m.top_k <= m.num_experts,
              source,
              ": num_experts_per_tok is ",
              m.top_k,
              "; it must be between 1 and the number of experts (",
              m.num_experts,
              ")");
  TORCH_CHECK(m.expert_intermediate_size > 0,
              source,
              ": the experts' intermediate size must be positive, got ",
              m.expert_intermediate_size);
  TORCH_CHECK(optional_integer(j, "shared_expert_intermediate_size", 0, source) == 0,
              source,
              ": shared_expert_intermediate_size is set: a shared expert (Qwen2-MoE) is not supported");
  TORCH_CHECK(optional_or<double>(j, "router_jitter_noise", 0.0) == 0.0,
              source,
              ": router_jitter_noise is ",
              optional_or<double>(j, "router_jitter_noise", 0.0),
              ": training-time router noise is not supported; set it to 0 (Mixtral's released configs do)");
  const int64_t step = mixtral ? 1 : optional_integer(j, "decoder_sparse_step", 1, source);
  TORCH_CHECK(step > 0, source, ": decoder_sparse_step must be positive, got ", step);
  m.sparse.assign(c.num_layers, false);
  for (int64_t i = 0; i < c.num_layers; ++i) m.sparse[i] = (i + 1) % step == 0;
  if (!mixtral && j.contains("mlp_only_layers") && j.at("mlp_only_layers").is_array()) {
    for (const auto& v : j.at("mlp_only_layers")) {
      check_whole_number(v, "mlp_only_layers", source);
      const auto i = v.get<int64_t>();
      TORCH_CHECK(i >= 0 && i < c.num_layers,
                  source,
                  ": mlp_only_layers names layer ",
                  i,
                  " but the model has layers 0..",
                  c.num_layers - 1);
      m.sparse[i] = false;
    }
  }
  return m;
}

// Gemma4TextConfig's expert block (enable_moe_block): num_experts experts of width
// moe_intermediate_size, top_k_experts of them per token (not num_experts_per_tok), on every
// layer beside the dense MLP. No load-balancing loss exists for Gemma 4.
MoeConfig read_gemma4_moe(const ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  MoeConfig m;
  auto positive = [&](const char* key) {
    const auto v = required<int64_t>(j, key, source);
    TORCH_CHECK(v > 0, source, ": ", key, " must be positive with enable_moe_block: true, got ", v);
    return v;
  };
  m.num_experts = positive("num_experts");
  m.top_k = positive("top_k_experts");
  m.expert_intermediate_size = positive("moe_intermediate_size");
  TORCH_CHECK(m.num_experts <= (int64_t{1} << 16) && m.expert_intermediate_size <= (int64_t{1} << 22),
              source,
              ": num_experts ",
              m.num_experts,
              " or moe_intermediate_size ",
              m.expert_intermediate_size,
              " is beyond any real model; the config.json is damaged");
  TORCH_CHECK(m.top_k <= m.num_experts,
              source,
              ": top_k_experts is ",
              m.top_k,
              "; it must be between 1 and num_experts (",
              m.num_experts,
              ")");
  return gemma4_moe_config(c.num_layers, m.num_experts, m.top_k, m.expert_intermediate_size);
}

}  // namespace

MoeConfig gemma4_moe_config(int64_t num_layers, int64_t num_experts, int64_t top_k, int64_t intermediate) {
  MoeConfig m;
  m.num_experts = num_experts;
  m.top_k = top_k;
  m.expert_intermediate_size = intermediate;
  m.norm_topk_prob = true;        // Gemma4TextRouter always renormalises the top-k
  m.fp32_routing_weights = true;  // and keeps the weights in float32
  m.sparse.assign(num_layers, true);
  m.dense_mlp_too = true;
  m.experts_path = "experts";
  m.router_path = "router.proj";
  m.router_is_linear = true;
  return m;
}

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
    case Architecture::gemma2:
      return "gemma2";
    case Architecture::gemma3:
      return "gemma3_text";
    case Architecture::gemma4:
      return "gemma4_text";
    case Architecture::qwen3_moe:
      return "qwen3_moe";
    case Architecture::mixtral:
      return "mixtral";
  }
  return "?";
}

ModelConfig ModelConfig::from_json(const nlohmann::json& file, const std::string& source) {
  TORCH_CHECK(file.is_object(), source, ": config.json must hold a JSON object");
  ModelConfig c;
  c.raw = file;
  if (file.contains("model_type") && file.at("model_type") == "gemma3") {
    // Gemma3ForConditionalGeneration: the decoder's config is text_config, its tensors under
    // model.language_model.; tie_word_embeddings is the outer config's (default true).
    TORCH_CHECK(file.contains("text_config") && file.at("text_config").is_object(),
                source,
                ": a gemma3 (multimodal) config needs a text_config object for its language model");
    auto text = file.at("text_config");
    text["model_type"] = "gemma3_text";
    text["tie_word_embeddings"] = optional_or<bool>(file, "tie_word_embeddings", true);
    auto inner = from_json(text, source + " text_config");
    inner.raw = file;
    inner.weight_prefix = "model.language_model.";
    inner.initializer_range = optional_or<double>(file, "initializer_range", 0.02);
    // Gemma3ForConditionalGeneration never applies final_logit_softcapping (Gemma3ForCausalLM does).
    inner.final_logit_softcap = std::nullopt;
    return inner;
  }
  if (file.contains("model_type") && file.at("model_type") == "gemma4") {
    // Gemma4ForConditionalGeneration: the decoder's config is text_config, its tensors under
    // model.language_model. on disk as in memory, no lm_head stored (tied, default true); its
    // forward caps the logits as Gemma4ForCausalLM does.
    TORCH_CHECK(file.contains("text_config") && file.at("text_config").is_object(),
                source,
                ": a gemma4 (multimodal) config needs a text_config object for its language model");
    auto text = file.at("text_config");
    text["model_type"] = "gemma4_text";
    text["tie_word_embeddings"] = optional_or<bool>(file, "tie_word_embeddings", true);
    auto inner = from_json(text, source + " text_config");
    inner.raw = file;
    inner.weight_prefix = "model.language_model.";
    inner.initializer_range = optional_or<double>(file, "initializer_range", 0.02);
    return inner;
  }
  const auto type = required<std::string>(file, "model_type", source);
  if (type == "llama") {
    c.arch = Architecture::llama;
  } else if (type == "mistral") {
    c.arch = Architecture::mistral;
  } else if (type == "qwen2") {
    c.arch = Architecture::qwen2;
  } else if (type == "qwen3") {
    c.arch = Architecture::qwen3;
  } else if (type == "gemma2") {
    c.arch = Architecture::gemma2;
  } else if (type == "gemma3_text") {
    c.arch = Architecture::gemma3;
  } else if (type == "gemma4_text") {
    c.arch = Architecture::gemma4;
  } else if (type == "qwen3_moe") {
    c.arch = Architecture::qwen3_moe;
  } else if (type == "mixtral") {
    c.arch = Architecture::mixtral;
  } else {
    TORCH_CHECK(false,
                source,
                ": model_type '",
                type,
                "' is not supported; supported: llama, mistral, qwen2, qwen3, gemma2, gemma3_text, gemma3, "
                "gemma4_text, gemma4, qwen3_moe, mixtral");
  }
  c.gemma = c.arch == Architecture::gemma2 || c.arch == Architecture::gemma3 || c.arch == Architecture::gemma4;
  nlohmann::json completed;
  if (c.gemma) {
    completed = gemma_defaults(c.arch);
    completed.update(file);
  }
  const nlohmann::json& j = c.gemma ? completed : file;
  check_integer_keys(j, source);
  c.vocab_size = required<int64_t>(j, "vocab_size", source);
  c.hidden_size = required<int64_t>(j, "hidden_size", source);
  c.intermediate_size = required<int64_t>(j, "intermediate_size", source);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", source);
  c.num_heads = required<int64_t>(j, "num_attention_heads", source);
  c.num_kv_heads = optional_integer(j, "num_key_value_heads", c.num_heads, source);
  c.head_dim = optional_integer(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0, source);
  c.max_position_embeddings = optional_integer(j, "max_position_embeddings", 2048, source);
  c.rms_norm_eps = optional_or<double>(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = optional_or<bool>(j, "tie_word_embeddings", c.gemma);
  c.initializer_range = optional_or<double>(j, "initializer_range", 0.02);
  if (c.initializer_range == 0) c.initializer_range = 0.02;  // transformers: `initializer_range or 0.02`
  const bool attention_bias = optional_or<bool>(j, "attention_bias", false);
  c.qkv_bias = c.arch == Architecture::qwen2 || attention_bias;
  c.o_bias = c.arch != Architecture::qwen2 && attention_bias;
  c.mlp_bias = optional_or<bool>(j, "mlp_bias", false);
  c.qk_norm = c.arch == Architecture::qwen3 || c.arch == Architecture::gemma3 || c.arch == Architecture::gemma4 ||
              c.arch == Architecture::qwen3_moe;
  if (c.arch == Architecture::gemma4) check_gemma4_supported(j, file, source);
  if (c.gemma) {
    read_gemma(c, j, source);
  } else {
    const auto act = optional_or<std::string>(j, "hidden_act", "silu");
    TORCH_CHECK(act == "silu", source, ": hidden_act '", act, "' is not supported for ", type, "; expected silu");
  }
  // Sizes far beyond any released model (the largest vocabularies are ~2^18, hidden sizes ~2^14,
  // layer counts ~2^7) are damage, and would otherwise die in an allocation of exabytes.
  for (auto [name, v, most] : {std::tuple{"vocab_size", c.vocab_size, int64_t{1} << 22},
                               {"hidden_size", c.hidden_size, int64_t{1} << 20},
                               {"intermediate_size", c.intermediate_size, int64_t{1} << 22},
                               {"num_hidden_layers", c.num_layers, int64_t{1} << 14},
                               {"num_attention_heads", c.num_heads, int64_t{1} << 14},
                               {"num_key_value_heads", c.num_kv_heads, int64_t{1} << 14},
                               {"head_dim", c.head_dim, int64_t{1} << 16}}) {
    TORCH_CHECK(v > 0, source, ": ", name, " must be positive, got ", v);
    TORCH_CHECK(v <= most,
                source,
                ": ",
                name,
                " is ",
                v,
                ", beyond any real model (qtrain reads at most ",
                most,
                "); the config.json is damaged");
  }
  TORCH_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0,
              source,
              ": rms_norm_eps must be a small positive number (1e-6 or 1e-5 in released models), got ",
              c.rms_norm_eps);
  TORCH_CHECK(std::isfinite(c.initializer_range) && c.initializer_range > 0,
              source,
              ": initializer_range must be a small positive number (0.02 in most released models), got ",
              c.initializer_range);
  if (c.arch == Architecture::qwen3_moe || c.arch == Architecture::mixtral) c.moe = read_moe(c, j, source);
  if (c.arch == Architecture::gemma4 && optional_or<bool>(j, "enable_moe_block", false)) {
    c.moe = read_gemma4_moe(c, j, source);
  }
  TORCH_CHECK(c.num_heads % c.num_kv_heads == 0,
              source,
              ": num_attention_heads ",
              c.num_heads,
              " is not a multiple of num_key_value_heads ",
              c.num_kv_heads);
  TORCH_CHECK(c.head_dim % 2 == 0, source, ": head_dim ", c.head_dim, " must be even for rotary embeddings");
  if (c.arch == Architecture::gemma3) {
    read_gemma3_rope(c, j, source);
  } else if (c.arch == Architecture::gemma4) {
    read_gemma4_rope(c, j, source);
  } else {
    read_rope(c, j, source);
  }

  // Sliding windows: Mistral on every layer when sliding_window is set; Qwen2/3 only with
  // use_sliding_window, on layers >= max_window_layers; layer_types wins where present.
  c.sliding_window.assign(c.num_layers, std::nullopt);
  const auto window = optional_integer(j, "sliding_window", 0, source);
  auto types = j.contains("layer_types") && j.at("layer_types").is_array() ? j.at("layer_types")
               : c.gemma                                                   ? gemma_layer_types(c, j, source)
                                                                           : nlohmann::json();
  // Gemma4TextConfig makes the last layer full_attention whatever layer_types says (a warning).
  if (c.arch == Architecture::gemma4 && !types.empty()) types.back() = "full_attention";
  if (types.is_array()) {
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
    // Qwen3-MoE has no max_window_layers: use_sliding_window puts the window on every layer.
    const bool qwen = c.arch == Architecture::qwen2 || c.arch == Architecture::qwen3;
    const bool on = !(qwen || c.arch == Architecture::qwen3_moe) || optional_or<bool>(j, "use_sliding_window", false);
    const int64_t first = qwen ? optional_integer(j, "max_window_layers", c.num_layers, source) : 0;
    for (int64_t i = first; on && i < c.num_layers; ++i) c.sliding_window[i] = window;
  }
  if (c.arch == Architecture::gemma4) read_gemma4_attention(c, j, source);
  return c;
}

int64_t ModelConfig::rope_head_dim(bool sliding) const {
  for (int64_t i = 0; i < num_layers && i < static_cast<int64_t>(sliding_window.size()); ++i) {
    if (sliding_window[i].has_value() == sliding) return attention(i).head_dim;
  }
  return head_dim;
}

nlohmann::json ModelConfig::to_json() const {
  if (!raw.is_null() && !raw.empty()) return raw;
  static const char* classes[] = {"LlamaForCausalLM",
                                  "MistralForCausalLM",
                                  "Qwen2ForCausalLM",
                                  "Qwen3ForCausalLM",
                                  "Gemma2ForCausalLM",
                                  "Gemma3ForCausalLM",
                                  "Gemma4ForCausalLM",
                                  "Qwen3MoeForCausalLM",
                                  "MixtralForCausalLM"};
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
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = arch == Architecture::qwen2 ? false : o_bias;
  auto rope_json = [](const RopeParams& r) {
    nlohmann::json rope = {{"rope_theta", r.theta}, {"rope_type", r.scaling.type}};
    if (r.scaling.type != "default") rope["factor"] = r.scaling.factor;
    if (r.scaling.type == "proportional") rope["partial_rotary_factor"] = r.scaling.partial_rotary_factor;
    if (r.scaling.type == "llama3") {
      rope["low_freq_factor"] = r.scaling.low_freq_factor;
      rope["high_freq_factor"] = r.scaling.high_freq_factor;
      rope["original_max_position_embeddings"] = r.scaling.original_max_position_embeddings;
    }
    return rope;
  };
  const RopeParams global{rope_theta, rope_scaling};
  if (arch == Architecture::gemma4) {
    // The spelling transformers re-saves (per_layer_config for the layers whose shape differs),
    // and no per-layer embeddings or KV sharing.
    nlohmann::json per_layer = nlohmann::json::object();
    bool k_eq_v = false;
    for (int64_t i = 0; i < num_layers; ++i) {
      const auto a = attention(i);
      k_eq_v = k_eq_v || a.k_eq_v;
      if (a.head_dim != head_dim || a.num_kv_heads != num_kv_heads) {
        per_layer[std::to_string(i)] = {{"head_dim", a.head_dim}, {"num_key_value_heads", a.num_kv_heads}};
      }
    }
    j["per_layer_config"] = per_layer;
    j["attention_k_eq_v"] = k_eq_v;
    j["hidden_size_per_layer_input"] = 0;
    j["num_kv_shared_layers"] = 0;
    j["enable_moe_block"] = moe.has_value();
    if (moe) {
      j["num_experts"] = moe->num_experts;
      j["top_k_experts"] = moe->top_k;
      j["moe_intermediate_size"] = moe->expert_intermediate_size;
    }
  } else if (gemma) {
    // An int in transformers' strict Gemma configs.
    j["query_pre_attn_scalar"] = std::llround(query_pre_attn_scalar.value_or(256.0));
    j["attn_logit_softcapping"] = attn_logit_softcap ? nlohmann::json(*attn_logit_softcap) : nlohmann::json(nullptr);
  }
  if (gemma) {
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["final_logit_softcapping"] = final_logit_softcap ? nlohmann::json(*final_logit_softcap) : nlohmann::json(nullptr);
    auto types = nlohmann::json::array();
    j["sliding_window"] = nullptr;
    for (const auto& w : sliding_window) {
      types.push_back(w ? "sliding_attention" : "full_attention");
      if (w) j["sliding_window"] = *w;
    }
    j["layer_types"] = types;
    j["rope_parameters"] = sliding_rope ? nlohmann::json{{"full_attention", rope_json(global)},
                                                         {"sliding_attention", rope_json(*sliding_rope)}}
                                        : rope_json(global);
    // Gemma's tokenizer: <pad> 0, <eos> 1, <bos> 2.
    j["pad_token_id"] = 0;
    j["bos_token_id"] = 2;
    j["eos_token_id"] = 1;
  } else {
    j["hidden_act"] = "silu";
    j["mlp_bias"] = mlp_bias;
    j["rope_parameters"] = rope_json(global);
    const auto window = sliding_window.empty() ? std::nullopt : sliding_window.back();
    j["sliding_window"] = window ? nlohmann::json(*window) : nlohmann::json(nullptr);
    if (window && arch != Architecture::mistral && arch != Architecture::mixtral) {
      j["use_sliding_window"] = true;
      int64_t first = num_layers;
      for (int64_t i = num_layers - 1; i >= 0 && sliding_window[i]; --i) first = i;
      j["max_window_layers"] = first;
    }
    j["bos_token_id"] = 1;
    j["eos_token_id"] = 2;
  }
  if (moe && arch != Architecture::gemma4) {
    j["num_experts_per_tok"] = moe->top_k;
    j["output_router_logits"] = moe->output_router_logits;
    j["router_aux_loss_coef"] = moe->router_aux_loss_coef;
    if (arch == Architecture::mixtral) {
      j["num_local_experts"] = moe->num_experts;
      j["intermediate_size"] = moe->expert_intermediate_size;
    } else {
      j["num_experts"] = moe->num_experts;
      j["moe_intermediate_size"] = moe->expert_intermediate_size;
      j["norm_topk_prob"] = moe->norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      auto dense = nlohmann::json::array();
      for (int64_t i = 0; i < num_layers; ++i) {
        if (!moe->sparse[i]) dense.push_back(i);
      }
      j["mlp_only_layers"] = dense;
    }
  }
  j["dtype"] = "float32";
  return j;
}

}  // namespace qtrain::engine::model
