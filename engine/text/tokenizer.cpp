// See tokenizer.h.
#include "engine/text/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/text/decoder.h"
#include "engine/text/json_depth.h"
#include "engine/text/json_fields.h"
#include "engine/text/normalizer.h"
#include "engine/text/post_processor.h"
#include "engine/text/pre_tokenizer.h"
#include "engine/text/regular_file.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {

// Note [Encode pipeline]
// HF's TokenizerImpl::encode_single_sequence, for one text:
//  1. cut out the normalized:false added tokens on the raw text (Note [Added tokens]);
//  2. normalize each remaining segment, then cut out the normalized:true added tokens in it;
//  3. pre-tokenize each remaining piece of text (so Prepend, ByteLevel add_prefix_space and
//     Metaspace "always" act on every segment, also after a special token; Metaspace "first"
//     only on the segment that starts at offset 0 of the input);
//  4. run BPE on each piece (Note [BPE merge order]);
//  5. run the post-processor (BOS and the like only with add_special_tokens).
// The json's `truncation` and `padding` are not applied: qtrain packs and truncates sequences
// itself (transformers also re-applies them only when they are set).

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

std::string read_file(const std::filesystem::path& path) {
  if (auto problem = regular_file_problem(path, kMaxTokenizerBytes); !problem.empty()) {
    throw TokenizerError(path.string() + " " + problem);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path.string() + ": cannot read it; check the path and permissions");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json parse_json(const std::string& text, const std::string& file) {
  if (auto problem = json_depth_problem(text); !problem.empty()) throw TokenizerError(file + ": " + problem);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw TokenizerError(file + ": not valid JSON (" + e.what() + "); is the download complete?");
  }
}

}  // namespace

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& file) {
  const auto j = parse_json(json_text, file);
  const JsonSite root{file, ""};
  check_keys(j,
             root,
             {"version",
              "truncation",
              "padding",
              "added_tokens",
              "normalizer",
              "pre_tokenizer",
              "model",
              "post_processor",
              "decoder"});
  Tokenizer t;
  t.file_ = file;
  auto get = [&](const char* key) { return j.contains(key) ? j[key] : nlohmann::json(); };
  t.normalizer_ = parse_normalizer(get("normalizer"), root.key("normalizer"));
  t.pre_tokenizer_ = parse_pre_tokenizer(get("pre_tokenizer"), root.key("pre_tokenizer"));
  if (!j.contains("model") || !j["model"].is_object()) fail(root.key("model"), "missing: a tokenizer needs a model");
  t.model_ = std::make_unique<Bpe>(Bpe::parse(j["model"], root.key("model")));
  t.post_processor_ = parse_post_processor(get("post_processor"), root.key("post_processor"));
  t.decoder_ = parse_decoder(get("decoder"), root.key("decoder"));
  t.added_ = AddedTokens::parse(get("added_tokens"), root.key("added_tokens"), t.normalizer_.get(), *t.model_);
  return t;
}

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const auto json_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(json_path)) {
    throw TokenizerError(json_path.string() +
                         ": not found; qtrain reads Hugging Face tokenizer.json files (a folder with only a "
                         "SentencePiece tokenizer.model must be converted first, e.g. by saving it with "
                         "transformers' AutoTokenizer)");
  }
  Tokenizer t = from_json(read_file(json_path), json_path.string());
  const auto config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const auto c = parse_json(read_file(config_path), config_path.string());
    t.config_.bos_token = token_name(c, "bos_token");
    t.config_.eos_token = token_name(c, "eos_token");
    t.config_.pad_token = token_name(c, "pad_token");
    t.config_.unk_token = token_name(c, "unk_token");
    if (c.contains("chat_template") && c["chat_template"].is_string()) {
      t.config_.chat_template = c["chat_template"].get<std::string>();
    }
  }
  // transformers (4.43 on) saves the template apart, and reads it in place of tokenizer_config's.
  if (const auto jinja = dir / "chat_template.jinja"; std::filesystem::exists(jinja)) {
    t.config_.chat_template = read_file(jinja);
  }
  return t;
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const size_t at = utf8_invalid_at(text); at != text.size()) {
    throw TokenizerError("encode: the text is not valid UTF-8 (at byte " + std::to_string(at) +
                         "); tokenizers take Unicode text, so decode the input first");
  }
  Encoding e;
  // The token string of an added token is the text it covers, stripped whitespace included (HF).
  auto emit_added = [&](int32_t id, std::string_view covered, Span span) {
    e.ids.push_back(id);
    e.tokens.emplace_back(covered);
    e.offsets.push_back(span);
    e.special_tokens_mask.push_back(0);
  };
  std::vector<AlignedText> pieces;
  for (const auto& cut : added_.split(text, false)) {
    if (cut.id >= 0) {
      emit_added(cut.id,
                 text.substr(cut.begin, cut.end - cut.begin),
                 {static_cast<uint32_t>(cut.begin), static_cast<uint32_t>(cut.end)});
      continue;
    }
    AlignedText segment = AlignedText::original(text, cut.begin, cut.end);
    if (normalizer_) normalizer_->normalize(segment);
    std::vector<TextCut> sub =
        added_.has_normalized() ? added_.split(segment.text, true) : std::vector<TextCut>{{0, segment.text.size(), -1}};
    for (const auto& s : sub) {
      if (s.end == s.begin) continue;
      if (s.id >= 0) {
        emit_added(s.id, std::string_view(segment.text).substr(s.begin, s.end - s.begin), segment.span(s.begin, s.end));
        continue;
      }
      pieces.clear();
      pieces.push_back(s.begin == 0 && s.end == segment.text.size() ? segment : segment.slice(s.begin, s.end));
      if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
      for (const auto& p : pieces) {
        for (const auto& tok : model_->tokenize(p.text)) {
          e.ids.push_back(tok.id);
          e.tokens.push_back(*model_->id_to_token(tok.id));
          e.offsets.push_back(p.span(tok.begin, tok.end));
          e.special_tokens_mask.push_back(0);
        }
      }
    }
  }
  if (post_processor_) post_processor_->process(e, add_special_tokens);
  return e;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* a = added_.by_id(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->content);
    } else if (const std::string* t = model_->id_to_token(id)) {
      // HF skips by content: a model token whose text is a special added token is skipped too.
      if (skip_special_tokens) {
        const auto aid = added_.id_of(*t);
        if (aid && added_.by_id(*aid)->special) continue;
      }
      tokens.push_back(*t);
    }
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = added_.id_of(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = added_.by_id(id)) return a->content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

size_t Tokenizer::vocab_size() const {
  size_t n = model_->vocab_entries();
  for (const auto& a : added_.tokens()) {
    if (!model_->token_to_id(a.content)) ++n;
  }
  return n;
}

int32_t Tokenizer::add_token(const std::string& content, bool special) {
  if (const auto id = added_.id_of(content)) return *id;
  AddedToken t;
  t.content = content;
  t.special = special;
  t.normalized = false;
  return added_.add(std::move(t), normalizer_.get(), *model_);
}

std::vector<std::pair<size_t, size_t>> char_offsets(std::string_view text, const std::vector<Span>& byte_offsets) {
  const auto index = utf8_char_index(text);
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(byte_offsets.size());
  for (const auto& s : byte_offsets) out.emplace_back(index[s.begin], index[s.end]);
  return out;
}

}  // namespace qtrain::engine::text
