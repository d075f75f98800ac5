// The `added_tokens` of tokenizer.json (HF's AddedVocabulary): tokens cut out of the text
// before the normalizer and the model see it. See Note [Added tokens].
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/text/text_error.h"

namespace qtrain::engine::text {

class Normalizer;
class Bpe;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A cut of a text: [begin, end) bytes, and the added token there (-1: plain text).
struct TextCut {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedTokens {
 public:
  // `normalizer` (may be null) gives the normalized form of `normalized:true` tokens; `model`
  // gives the ids of tokens it already has. See Note [Added token ids].
  static AddedTokens parse(const nlohmann::json& j,
                           const JsonSite& site,
                           const Normalizer* normalizer,
                           const Bpe& model);

  // Adds one token as HF's AddedVocabulary::add_tokens does (Note [Added token ids]) and returns
  // its id.
  int32_t add(AddedToken token, const Normalizer* normalizer, const Bpe& model);

  // Cuts `text` at the raw-matched tokens (normalized:false) or, with `normalized_pass`, at the
  // normalized:true ones; the cuts cover the whole text in order (none for an empty text).
  std::vector<TextCut> split(std::string_view text, bool normalized_pass) const;
  bool has_normalized() const { return !by_first_byte_[1].empty(); }

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // One token by the rule of Note [Added token ids], without the match tables; index() builds
  // them.
  void insert(AddedToken token, const Normalizer* normalizer, const Bpe& model);
  void index();

  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_text_;  // per token: content, or its normalized form
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  // [0]: raw pass, [1]: normalized pass; per first byte, token indices longest first.
  std::vector<std::vector<size_t>> by_first_byte_[2];
};

}  // namespace qtrain::engine::text
