// See gguf_export.h and Note [GGUF export] there.
#include "engine/train/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/data/model_tokenizer.h"
#include "engine/io/gguf_writer.h"
#include "engine/io/hf_folder.h"
#include "engine/io/sha256.h"
#include "engine/model/lora_attach.h"
#include "engine/model/merged_weights.h"
#include "engine/model/saved_modules.h"
#include "engine/train/run_model.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using ops::GgmlType;

// llama.cpp's check text (convert_hf_to_gguf.py, get_vocab_base_pre).
const std::string kCheckText =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\U0001F680 (normal) \U0001F636\u200d\U0001F32B\uFE0F (multiple "
    "emojis concatenated) \u2705 \U0001F999\U0001F999 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "\u1780\u17B6\u1793\u17CB\u178F\u17C2\u1796\u17B7\u179F\u17C1\u179F\u17A2\u17B6\u1785\U0001F601 "
    "?\u6211\u60F3\u5728apple\u5DE5\u4F5C1314151\u5929\uFF5E ------======= \u043D\u0435\u0449\u043E \u043D\u0430 "
    "\u0411\u044A\u043B\u0433\u0430\u0440\u0441\u043A\u0438 ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told "
    "he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL";

// The converter's names for the hashes of the families qtrain reads (its table has many more).
const std::map<std::string, std::string> kPreTokenizers = {
    {"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe"},  // Meta-Llama-3-8B
    {"c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d", "smaug-bpe"},  // Smaug-Llama-3-70B
    {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"},      // Qwen1.5-7B
    {"d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c", "qwen2"},      // Qwen3-Embedding
    {"63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e", "tekken"},     // Mistral-Nemo
    {"855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249", "smollm"},     // SmolLM-135M
    {"3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2"},      // gpt2
};

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  TORCH_CHECK(in.good(), file.string(), ": cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, file.string(), ": not valid JSON (", e.what(), ")");
  }
}

// The GGUF name of a transformers tensor name of a Llama-family decoder; nullopt: not written.
std::optional<std::string> gguf_name(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> layer_parts = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  const std::string index = name.substr(prefix.size(), dot - prefix.size());
  const std::string part = name.substr(dot + 1);
  for (const auto& [hf, gguf] : layer_parts) {
    if (part == hf) return "blk." + index + "." + gguf;
  }
  return std::nullopt;
}

// LlamaModel.permute: transformers' rotate-half rows of q / k to ggml's interleaved pairs.
at::Tensor permute_rows(const at::Tensor& w, int64_t heads) {
  auto shape = w.sizes().vec();
  std::vector<int64_t> split = {heads, 2, w.size(0) / heads / 2};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return w.reshape(split).transpose(1, 2).reshape(shape).contiguous();
}

// The id a tokenizer_config.json role names, looked up in tokenizer.json's vocabulary.
std::optional<uint32_t> role_id(const nlohmann::json& config,
                                const std::string& role,
                                const std::map<std::string, int64_t>& ids) {
  if (!config.contains(role)) return std::nullopt;
  const auto& v = config[role];
  const std::string token = v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
  const auto it = ids.find(token);
  if (it == ids.end()) return std::nullopt;
  return static_cast<uint32_t>(it->second);
}

void add_tokenizer(io::GgufWriter& w,
                   const fs::path& base,
                   int64_t rows,
                   const data::TextTokenizer& tokenizer,
                   const std::string& pre_name,
                   std::FILE* log) {
  const auto tj = read_json(base / "tokenizer.json");
  const auto& model = tj.at("model");
  TORCH_CHECK(model.value("type", "") == "BPE" && model.contains("merges"),
              (base / "tokenizer.json").string(),
              ": export-gguf writes byte-level BPE tokenizers (Llama 3, Qwen, Mistral Tekken, SmolLM); this one's "
              "model is ",
              model.value("type", "unknown"));
  std::map<std::string, int64_t> ids;
  std::vector<std::string> tokens(rows);
  std::vector<int32_t> types(rows, 5);  // unused
  for (int64_t i = 0; i < rows; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [token, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    ids[token] = i;
    if (i < rows) {
      tokens[i] = token;
      types[i] = 1;  // normal
    }
  }
  for (const auto& added : tj.value("added_tokens", nlohmann::json::array())) {
    const int64_t i = added.at("id").get<int64_t>();
    const auto content = added.at("content").get<std::string>();
    ids[content] = i;
    if (i < rows) {
      tokens[i] = content;
      types[i] = added.value("special", false) ? 3 : 4;  // control : user-defined
    }
  }
  std::vector<std::string> merges;
  for (const auto& m : model.at("merges")) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  const std::string pre = pre_name.empty() ? gguf_pre_tokenizer(tokenizer) : pre_name;
  std::fprintf(log,
               "export-gguf: tokenizer gpt2 (pre %s), %lld tokens, %zu merges\n",
               pre.c_str(),
               static_cast<long long>(rows),
               merges.size());
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_int32s("tokenizer.ggml.token_type", types);
  w.add_strings("tokenizer.ggml.merges", merges);
  const auto config_file = base / "tokenizer_config.json";
  const auto config = fs::exists(config_file) ? read_json(config_file) : nlohmann::json::object();
  for (const auto& [role, key] : std::vector<std::pair<std::string, std::string>>{{"bos_token", "bos_token_id"},
                                                                                  {"eos_token", "eos_token_id"},
                                                                                  {"unk_token", "unknown_token_id"},
                                                                                  {"pad_token", "padding_token_id"}}) {
    if (const auto id = role_id(config, role, ids)) w.add_uint32("tokenizer.ggml." + key, *id);
  }
  // add_bos_token: tokenizer_config.json's, else whether the post-processor's single template
  // starts with a special token.
  bool add_bos = false;
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    add_bos = config["add_bos_token"].get<bool>();
  } else if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
    const auto& single = tj["post_processor"].value("single", nlohmann::json::array());
    add_bos = !single.empty() && single[0].contains("SpecialToken");
  }
  w.add_bool("tokenizer.ggml.add_bos_token", add_bos);
  if (tj.contains("pre_tokenizer") && tj["pre_tokenizer"].is_object() &&
      tj["pre_tokenizer"].value("type", "") == "ByteLevel") {
    w.add_bool("tokenizer.ggml.add_space_prefix", tj["pre_tokenizer"].value("add_prefix_space", false));
  }
  if (const auto chat = tokenizer.chat_template()) w.add_string("tokenizer.chat_template", *chat);
}

// The converter's rope_freqs for "llama3" rope (LlamaModel.generate_extra_tensors): the factor
// by which ggml divides each frequency, 1 / (transformers' scaling of it), computed with the
// converter's float32 operations (Python's `a / tensor` is a reciprocal times a).
at::Tensor llama3_rope_factors(const model::ModelConfig& mc) {
  const auto& s = mc.rope_scaling;
  const auto freqs = at::reciprocal(at::pow(mc.rope_theta, at::arange(0, mc.head_dim, 2, at::kFloat) / mc.head_dim));
  const auto wavelen = at::reciprocal(freqs) * (2 * M_PI);
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const auto smooth =
      (at::reciprocal(wavelen) * old_ctx - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const auto medium = at::reciprocal((1 - smooth) / s.factor + smooth);
  return at::where(wavelen < old_ctx / s.high_freq_factor,
                   at::ones_like(freqs),
                   at::where(wavelen > old_ctx / s.low_freq_factor, at::full_like(freqs, s.factor), medium));
}

uint32_t file_type(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return 0;
    case GgmlType::f16:
      return 1;
    case GgmlType::q8_0:
      return 7;
    case GgmlType::bf16:
      return 32;
  }
  return 0;
}

// The GGUF architecture of a model qtrain exports ("llama" for Llama and Mistral), or an error.
std::string gguf_architecture(const model::ModelConfig& mc) {
  using model::Architecture;
  const bool llama = mc.arch == Architecture::llama || mc.arch == Architecture::mistral;
  TORCH_CHECK(llama || mc.arch == Architecture::qwen2 || mc.arch == Architecture::qwen3,
              "export-gguf: ",
              model::architecture_name(mc.arch),
              " is not exported yet; Llama, Mistral, Qwen2 and Qwen3 are (docs/GGUF.md)");
  return llama ? "llama" : model::architecture_name(mc.arch);
}

// Llama's q and k rows (and a LoRA B's, which are the same rows) in ggml's order.
at::Tensor gguf_rows(const std::string& arch,
                     const std::string& name,
                     const at::Tensor& t,
                     const model::ModelConfig& mc) {
  if (arch != "llama") return t;
  if (name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias")) return permute_rows(t, mc.num_heads);
  if (name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias")) return permute_rows(t, mc.num_kv_heads);
  return t;
}

// The type a tensor of `shape` (numpy order) is written in: vectors in F32, matrices in `type`
// (Q8_0's blocks of 32 need rows of a multiple of 32; F16 otherwise).
GgmlType matrix_type(const std::vector<int64_t>& shape, GgmlType type) {
  if (shape.size() <= 1) return GgmlType::f32;
  return type == GgmlType::q8_0 && shape.back() % 32 != 0 ? GgmlType::f16 : type;
}

}  // namespace

std::string gguf_pre_tokenizer(const data::TextTokenizer& tokenizer) {
  const auto ids = tokenizer.tokenize(kCheckText, /*add_special_tokens=*/true).ids;
  std::string shown = "[";
  for (size_t i = 0; i < ids.size(); ++i) shown += (i ? ", " : "") + std::to_string(ids[i]);
  shown += "]";
  const auto hash = io::sha256_hex(shown);
  const auto it = kPreTokenizers.find(hash);
  TORCH_CHECK(it != kPreTokenizers.end(),
              "export-gguf: the tokenizer's pre-tokenizer hash is ",
              hash,
              ", which is not one of the families qtrain names for llama.cpp (llama-bpe, qwen2, tekken, smollm, "
              "gpt-2); look it up in llama.cpp's convert_hf_to_gguf.py (get_vocab_base_pre) and pass the name with "
              "--pre NAME");
  return it->second;
}

void write_gguf_adapter(
    const config::RunConfig& c, const fs::path& adapter, const fs::path& out, GgmlType type, std::FILE* log) {
  TORCH_CHECK(!adapter.empty() || !c.lora_model_dir.empty(),
              "export-gguf --adapter-only needs an adapter: pass --adapter DIR or set lora_model_dir");
  auto run = load_run_model(c, adapter, "export-gguf", log, model::LoadOptions{});
  const auto& lm = *run.lm;
  const auto& mc = lm.config();
  const std::string arch = gguf_architecture(mc);
  TORCH_CHECK(model::saved_modules(lm).empty(),
              "export-gguf --adapter-only: the adapter trains modules in full (modules_to_save: embeddings, head or "
              "norms), "
              "which a GGUF LoRA file cannot hold; export the merged model (without --adapter-only)");
  io::GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.type", "adapter");
  w.add_string("adapter.type", "lora");
  std::optional<double> alpha;
  for (const auto& [module, a] : model::lora_adapters(lm)) {
    const std::string name = module + ".weight";
    const auto gguf = gguf_name(name);
    TORCH_CHECK(gguf.has_value(),
                "export-gguf --adapter-only: the adapter of '",
                module,
                "' (MoE experts or router) has no place in a GGUF LoRA file; export the merged model");
    TORCH_CHECK(!a.magnitude.defined(),
                "export-gguf --adapter-only: DoRA (peft_use_dora) has no GGUF LoRA form; export the merged model");
    // llama.cpp scales each tensor pair by alpha / rank: one alpha for the file.
    const double module_alpha = a.scaling * static_cast<double>(a.rank());
    TORCH_CHECK(!alpha || std::abs(*alpha - module_alpha) <= 1e-9 * std::abs(module_alpha),
                "export-gguf --adapter-only: the adapters' alpha / rank differ between modules (rank_pattern or "
                "alpha_pattern), and a GGUF LoRA file has one alpha; export the merged model");
    alpha = module_alpha;
    const at::Tensor lora_a = a.a.detach().to(at::kFloat).contiguous();
    const at::Tensor lora_b = gguf_rows(arch, name, a.b.detach().to(at::kFloat), mc).contiguous();
    w.add_tensor(
        *gguf + ".lora_a", lora_a.sizes().vec(), matrix_type(lora_a.sizes().vec(), type), [lora_a] { return lora_a; });
    w.add_tensor(
        *gguf + ".lora_b", lora_b.sizes().vec(), matrix_type(lora_b.sizes().vec(), type), [lora_b] { return lora_b; });
  }
  TORCH_CHECK(alpha.has_value(), "export-gguf --adapter-only: the adapter adapts no linear layer");
  w.add_float32("adapter.lora.alpha", static_cast<float>(*alpha));
  w.write(out);
  std::fprintf(log, "export-gguf: %s (GGUF LoRA for %s, alpha %g)\n", out.c_str(), arch.c_str(), *alpha);
}

void write_gguf(const config::RunConfig& c,
                const fs::path& adapter,
                const fs::path& out,
                GgmlType type,
                const std::string& pre,
                std::FILE* log) {
  // The model is held in the dtype its float weights are stored in (bfloat16 or float16 where
  // all of them are, float32 otherwise): each merged weight is computed in float32 from it, from
  // the same values as a float32 copy would hold, at half the memory.
  const auto folder = io::HfFolder::open(c.base_model);
  model::LoadOptions options;
  std::optional<at::ScalarType> stored;
  for (const auto& name : folder.tensor_names()) {
    const auto t = folder.dtype(name);
    if (!at::isFloatingType(t)) continue;
    stored = !stored || *stored == t ? t : at::kFloat;
  }
  if (stored == at::kBFloat16 || stored == at::kHalf) options.dtype = *stored;
  auto run = load_run_model(c, adapter, "export-gguf", log, options);
  const auto& lm = *run.lm;
  const auto& mc = lm.config();
  const std::string arch = gguf_architecture(mc);
  const bool llama = arch == "llama";
  TORCH_CHECK(mc.rope_scaling.type == "default" || (llama && mc.rope_scaling.type == "llama3"),
              "export-gguf: rope scaling '",
              mc.rope_scaling.type,
              "' (config.json) is not exported yet; default and Llama 3's llama3 are");
  TORCH_CHECK(lm.config().vocab_size == run.base_vocab_size,
              "export-gguf: the run adds tokens (tokens, special_tokens), which export-gguf does not write yet; "
              "merge first (qtrain merge) and export the merged folder");
  // Made one at a time while the file is written: one merged weight in memory at a time.
  const auto tensors = model::merged_tensor_makers(lm, folder, at::kFloat);

  io::GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", c.base_model.filename().string());
  w.add_uint32("general.file_type", file_type(type));
  if (type == GgmlType::q8_0) w.add_uint32("general.quantization_version", 2);
  w.add_uint32(arch + ".context_length", static_cast<uint32_t>(mc.max_position_embeddings));
  w.add_uint32(arch + ".embedding_length", static_cast<uint32_t>(mc.hidden_size));
  w.add_uint32(arch + ".feed_forward_length", static_cast<uint32_t>(mc.intermediate_size));
  w.add_uint32(arch + ".block_count", static_cast<uint32_t>(mc.num_layers));
  w.add_uint32(arch + ".attention.head_count", static_cast<uint32_t>(mc.num_heads));
  w.add_uint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(mc.num_kv_heads));
  w.add_float32(arch + ".rope.freq_base", static_cast<float>(mc.rope_theta));
  w.add_float32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(mc.rms_norm_eps));
  w.add_uint32(arch + ".vocab_size", static_cast<uint32_t>(mc.vocab_size));
  w.add_uint32(arch + ".rope.dimension_count", static_cast<uint32_t>(mc.head_dim));
  if (mc.head_dim * mc.num_heads != mc.hidden_size) {
    w.add_uint32(arch + ".attention.key_length", static_cast<uint32_t>(mc.head_dim));
    w.add_uint32(arch + ".attention.value_length", static_cast<uint32_t>(mc.head_dim));
  }
  const auto own = run.tokenizer ? nullptr : data::model_tokenizer(c.base_model, mc.vocab_size);
  if (fs::exists(c.base_model / "tokenizer.json")) {
    add_tokenizer(w, c.base_model, mc.vocab_size, run.tokenizer ? *run.tokenizer : *own, pre, log);
  } else {
    std::fprintf(log,
                 "export-gguf: %s has no tokenizer.json: the file holds no tokenizer (transformers can load its "
                 "weights; llama.cpp needs one)\n",
                 c.base_model.c_str());
  }
  if (mc.rope_scaling.type == "llama3") {
    const auto factors = llama3_rope_factors(mc);
    w.add_tensor("rope_freqs.weight", factors.sizes().vec(), GgmlType::f32, [factors] { return factors; });
  }
  for (const auto& t : tensors) {
    const auto gguf = gguf_name(t.name);
    TORCH_CHECK(gguf.has_value(), "export-gguf: no GGUF name for the tensor '", t.name, "'");
    w.add_tensor(
        *gguf, t.shape, matrix_type(t.shape, type), [&arch, &mc, &t] { return gguf_rows(arch, t.name, t.make(), mc); });
  }
  // A progress line every tenth of the tensors.
  w.write(out, [&](size_t i, size_t n) {
    if (i == n || i % std::max<size_t>(1, n / 10) == 0) std::fprintf(log, "export-gguf: %zu/%zu tensors\n", i, n);
  });
  std::fprintf(log, "export-gguf: %s (%s, %s)\n", out.c_str(), arch.c_str(), ops::ggml_type_name(type).c_str());
}

}  // namespace qtrain::engine::train
