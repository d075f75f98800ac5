// See gguf_tokenizer.h and Note [GGUF tokenizer] there.
#include "engine/train/gguf_tokenizer.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/io/hf_folder.h"
#include "engine/io/sentencepiece_model.h"
#include "engine/io/sha256.h"
#include "engine/text/json_fields.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

enum TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

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

nlohmann::json read_json_or_empty(const fs::path& file) {
  return fs::exists(file) ? io::parse_json_file(file) : nlohmann::json::object();
}

// gguf's SpecialVocab (Note [GGUF tokenizer]).
void add_special_vocab(io::GgufWriter& w, const fs::path& base, const nlohmann::json& tj, int64_t n_vocab, bool gpt2) {
  const auto config = read_json_or_empty(base / "tokenizer_config.json");
  const auto added = tj.value("added_tokens", nlohmann::json::array());
  std::optional<bool> add_bos, add_eos, add_sep;
  const auto bos = text::token_name(config, "bos_token");
  const auto eos = text::token_name(config, "eos_token");
  const auto sep = text::token_name(config, "sep_token");
  if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
    const auto& pp = tj["post_processor"];
    for (const auto& p : pp.contains("processors") ? pp["processors"] : nlohmann::json::array({pp})) {
      if (p.value("type", "") != "TemplateProcessing") continue;
      const auto single = p.value("single", nlohmann::json::array());
      if (single.size() <= 1) continue;
      const auto special = [](const nlohmann::json& e) -> std::optional<std::string> {
        if (!e.contains("SpecialToken")) return std::nullopt;
        return e["SpecialToken"].value("id", "");
      };
      const auto first = special(single.front()), last = special(single.back());
      if (first) add_bos = first == bos;
      if (last) add_eos = last == eos;
      // The pair template A [sep] [eos] B: add_sep where a separator or eos stands between.
      auto pair = p.value("pair", nlohmann::json::array());
      if (!pair.empty() && first && special(pair.front()) == first) pair.erase(pair.begin());
      if (!pair.empty() && last && special(pair.back()) == last) pair.erase(pair.end() - 1);
      const auto sequence = [](const nlohmann::json& e) {
        return e.contains("Sequence") ? e["Sequence"].value("id", "") : std::string();
      };
      if (pair.size() > 2 && sequence(pair.front()) == "A" && sequence(pair.back()) == "B") {
        const std::vector<nlohmann::json> middle(pair.begin() + 1, pair.end() - 1);
        const auto separates = [&](const nlohmann::json& e) {
          const auto id = special(e);
          return id && (id == sep || id == eos);
        };
        add_sep = (separates(middle[0]) && !last) || (middle.size() == 2 && separates(middle[1]));
      }
    }
  }
  const std::vector<std::pair<std::string, std::string>> roles = {{"bos", "bos_token_id"},
                                                                  {"eos", "eos_token_id"},
                                                                  {"unk", "unknown_token_id"},
                                                                  {"sep", "seperator_token_id"},
                                                                  {"pad", "padding_token_id"},
                                                                  {"cls", "cls_token_id"},
                                                                  {"mask", "mask_token_id"}};
  std::map<std::string, int64_t> ids;
  for (const auto& [role, key] : roles) {
    if (config.contains("add_" + role + "_token") && config["add_" + role + "_token"].is_boolean()) {
      const bool v = config["add_" + role + "_token"].get<bool>();
      if (role == "bos") add_bos = v;
      if (role == "eos") add_eos = v;
      if (role == "sep") add_sep = v;
    }
    const auto text = text::token_name(config, (role + "_token").c_str());
    if (!text) continue;
    for (const auto& a : added) {
      if (a.value("content", "") == *text) {
        if (a.at("id").get<int64_t>() < n_vocab) ids[role] = a.at("id").get<int64_t>();
        break;
      }
    }
  }
  const auto model_config = read_json_or_empty(base / "config.json");
  for (const auto& [role, key] : roles) {
    const auto entry = role + "_token_id";
    const auto& j = model_config.contains(entry) || !model_config.contains("text_config") ? model_config
                                                                                          : model_config["text_config"];
    if (!ids.count(role) && j.contains(entry) && j[entry].is_number_integer()) {
      const int64_t id = j[entry].get<int64_t>();
      if (id >= 0 && id < n_vocab) ids[role] = id;
    }
  }
  for (const auto& [role, key] : roles) {
    if (ids.count(role)) w.add_uint32("tokenizer.ggml." + key, static_cast<uint32_t>(ids[role]));
  }
  // A "gpt2" vocabulary always says whether to add bos (false where nothing says so), as
  // llama.cpp's own conversion of SmolLM2 does.
  if (add_bos || gpt2) w.add_bool("tokenizer.ggml.add_bos_token", add_bos.value_or(false));
  if (add_eos) w.add_bool("tokenizer.ggml.add_eos_token", *add_eos);
  if (add_sep) w.add_bool("tokenizer.ggml.add_sep_token", *add_sep);
}

// The "gpt2" vocabulary of a byte-level BPE tokenizer.json.
void add_bpe_vocab(io::GgufWriter& w,
                   const fs::path& base,
                   const nlohmann::json& tj,
                   int64_t rows,
                   const data::TextTokenizer& tokenizer,
                   const std::string& pre_name,
                   std::FILE* log) {
  const auto& model = tj.at("model");
  TORCH_CHECK(model.value("type", "") == "BPE" && model.contains("merges"),
              (base / "tokenizer.json").string(),
              ": export-gguf writes byte-level BPE tokenizers (Llama 3, Qwen, Mistral Tekken, SmolLM) and "
              "SentencePiece models (tokenizer.model); this one's model is ",
              model.value("type", "unknown"));
  TORCH_CHECK(!model.value("byte_fallback", false),
              (base / "tokenizer.json").string(),
              ": a SentencePiece-style tokenizer (byte_fallback) without its tokenizer.model, whose scores llama.cpp "
              "needs; copy the model's tokenizer.model into ",
              base.string());
  std::vector<std::string> tokens(rows);
  std::vector<int32_t> types(rows, unused);
  for (int64_t i = 0; i < rows; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [token, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    if (i < rows) {
      tokens[i] = token;
      types[i] = normal;
    }
  }
  for (const auto& added : tj.value("added_tokens", nlohmann::json::array())) {
    const int64_t i = added.at("id").get<int64_t>();
    if (i < rows) {
      tokens[i] = added.at("content").get<std::string>();
      types[i] = added.value("special", false) ? control : user_defined;
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
  if (tj.contains("pre_tokenizer") && tj["pre_tokenizer"].is_object() &&
      tj["pre_tokenizer"].value("type", "") == "ByteLevel") {
    w.add_bool("tokenizer.ggml.add_space_prefix", tj["pre_tokenizer"].value("add_prefix_space", false));
  }
}

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(const std::string& t) {
  const auto wrapped = [&t](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\uFF5C", "\uFF5C>") || wrapped("<unused", ">");
}

// The "llama" vocabulary of a SentencePiece model (the converter's _create_vocab_sentencepiece).
void add_sentencepiece_vocab(io::GgufWriter& w, const fs::path& base, int64_t rows, bool gemma, std::FILE* log) {
  const auto pieces = io::read_sentencepiece_model(base / "tokenizer.model");
  std::vector<std::string> tokens(rows);
  std::vector<float> scores(rows, -10000.0f);
  std::vector<int32_t> types(rows, unused);
  for (int64_t i = 0; i < rows; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (int64_t i = 0; i < rows && i < static_cast<int64_t>(pieces.size()); ++i) {
    using P = io::SentencePiece;
    const auto& p = pieces[i];
    tokens[i] = p.piece;
    scores[i] = p.score;
    types[i] = p.type == P::unknown   ? unknown
               : p.type == P::control ? control
               : p.type == P::unused  ? unused
               : p.type == P::byte    ? byte
                                      : normal;
  }
  const auto added = read_json_or_empty(base / "added_tokens.json");
  for (const auto& [text, id] : added.items()) {
    const int64_t i = id.get<int64_t>();
    if (i < rows) {
      tokens[i] = text;
      scores[i] = -1000.0f;
      types[i] = user_defined;
    }
  }
  const auto config = read_json_or_empty(base / "tokenizer_config.json");
  const auto decoder = config.value("added_tokens_decoder", nlohmann::json::object());
  for (const auto& [key, entry] : decoder.items()) {
    const int64_t i = std::stoll(key);
    if (i >= rows) continue;
    auto text = entry.value("content", "");
    if (entry.value("special", false) || looks_special(text)) {
      types[i] = control;
    } else {
      for (size_t at; (at = text.find("\u2581")) != std::string::npos;) text.replace(at, 3, " ");
      types[i] = user_defined;
    }
    tokens[i] = text;
    scores[i] = -1000.0f;
  }
  std::fprintf(log,
               "export-gguf: tokenizer llama (SentencePiece, %zu pieces), %lld tokens\n",
               pieces.size(),
               static_cast<long long>(rows));
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_float32s("tokenizer.ggml.scores", scores);
  w.add_int32s("tokenizer.ggml.token_type", types);
  if (gemma) w.add_bool("tokenizer.ggml.add_space_prefix", false);
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

void add_gguf_tokenizer(io::GgufWriter& w,
                        const fs::path& base,
                        int64_t rows,
                        const std::string& arch,
                        const data::TextTokenizer& tokenizer,
                        const std::string& pre,
                        std::FILE* log) {
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  const auto tj = read_json_or_empty(base / "tokenizer.json");
  const bool sentencepiece = fs::exists(base / "tokenizer.model") && (arch == "llama" || gemma);
  if (sentencepiece) {
    add_sentencepiece_vocab(w, base, rows, gemma, log);
  } else {
    add_bpe_vocab(w, base, tj, rows, tokenizer, pre, log);
  }
  add_special_vocab(w, base, tj, rows, /*gpt2=*/!sentencepiece);
  if (const auto chat = tokenizer.chat_template()) w.add_string("tokenizer.chat_template", *chat);
}

}  // namespace qtrain::engine::train
