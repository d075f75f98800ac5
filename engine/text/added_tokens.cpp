// See added_tokens.h.
#include "engine/text/added_tokens.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/text/aligned_text.h"
#include "engine/text/bpe.h"
#include "engine/text/json_fields.h"
#include "engine/text/normalizer.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {

// Note [Added tokens]
// HF (tokenizer/added_vocabulary.rs) finds added tokens with two Aho-Corasick automata in
// leftmost-longest mode: one over the contents of the normalized:false tokens, run on the raw
// text first, and one over the normalized forms of the normalized:true tokens, run on each
// normalized segment. Here both are a scan that, at each position from the left, takes the
// longest token starting there: the same matches. For each match, left to right:
//  - single_word: kept only if no word character (regex \w) touches it on either side;
//  - lstrip: the token's span grows left over whitespace, but not into the previous match;
//  - rstrip: it grows right over whitespace. Stripped whitespace produces no ids.
// The text between matches is a segment for the normalizer and the model. special:false
// tokens are cut out exactly like special ones (Qwen's <think>, Gemma's <h1>); `special` only
// matters to decode(skip_special_tokens). Splitting specials as text (HF's
// encode_special_tokens) is not offered yet.

// Note [Added token ids]
// HF does not take added_tokens[].id as given: loading a file adds the tokens one by one, in
// order, as AddedVocabulary::add_tokens does. A token whose content is already an added token or
// in the model's vocabulary gets that id; any other gets the next id after the model's
// vocabulary size (number of entries) and the added ids so far; a token equal in every field to
// one added before is skipped, and so is an empty one. HF only warns when this differs from the
// file's id, so qtrain follows the same rule (every real file of the supported families agrees
// with its ids anyway).

AddedTokens AddedTokens::parse(const nlohmann::json& j,
                               const JsonSite& site,
                               const Normalizer* normalizer,
                               const Bpe& model) {
  AddedTokens a;
  if (j.is_null()) return a;
  if (!j.is_array()) fail(site, "expected a list of added tokens");
  for (size_t i = 0; i < j.size(); ++i) {
    const auto s = site.index(i);
    const auto& e = j[i];
    check_keys(e, s, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    AddedToken t;
    required_field<int32_t>(e, "id", s);
    t.content = required_field<std::string>(e, "content", s);
    t.single_word = field<bool>(e, "single_word", s, false);
    t.lstrip = field<bool>(e, "lstrip", s, false);
    t.rstrip = field<bool>(e, "rstrip", s, false);
    t.special = field<bool>(e, "special", s, false);
    t.normalized = field<bool>(e, "normalized", s, !t.special);
    a.insert(std::move(t), normalizer, model);
  }
  a.index();
  return a;
}

int32_t AddedTokens::add(AddedToken token, const Normalizer* normalizer, const Bpe& model) {
  if (token.content.empty()) throw TokenizerError("an added token cannot be empty");
  const std::string content = token.content;
  insert(std::move(token), normalizer, model);
  index();
  return *id_of(content);
}

void AddedTokens::insert(AddedToken t, const Normalizer* normalizer, const Bpe& model) {
  if (t.content.empty()) return;
  for (const auto& o : tokens_) {
    if (o.content == t.content && o.single_word == t.single_word && o.lstrip == t.lstrip && o.rstrip == t.rstrip &&
        o.normalized == t.normalized && o.special == t.special) {
      return;
    }
  }
  if (const auto known = id_of(t.content)) {
    t.id = *known;
  } else if (const auto in_model = model.token_to_id(t.content)) {
    t.id = *in_model;
  } else {
    const auto vocab = static_cast<int32_t>(model.vocab_entries());
    int32_t max_id = -1;
    for (const auto& o : tokens_) max_id = std::max(max_id, o.id);
    t.id = max_id < 0 ? vocab : (max_id >= vocab || vocab == 0 ? max_id + 1 : vocab);
  }
  std::string match = t.content;
  if (t.normalized && normalizer != nullptr) {
    auto n = AlignedText::original(t.content, 0, t.content.size());
    normalizer->normalize(n);
    match = n.text;
  }
  by_id_[t.id] = tokens_.size();
  by_content_[t.content] = tokens_.size();
  match_text_.push_back(match);
  tokens_.push_back(std::move(t));
}

void AddedTokens::index() {
  for (auto& table : by_first_byte_) table.assign(256, {});
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (match_text_[i].empty()) continue;
    by_first_byte_[tokens_[i].normalized ? 1 : 0][static_cast<unsigned char>(match_text_[i][0])].push_back(i);
  }
  for (auto& table : by_first_byte_) {
    for (auto& list : table) {
      std::stable_sort(
          list.begin(), list.end(), [&](size_t x, size_t y) { return match_text_[x].size() > match_text_[y].size(); });
    }
  }
  // by_first_byte_[1] empty <=> no normalized tokens (has_normalized()).
  bool any_normalized = false;
  for (const auto& t : tokens_) any_normalized = any_normalized || t.normalized;
  if (!any_normalized) by_first_byte_[1].clear();
}

namespace {

// The character that ends at byte `end` (end > 0).
char32_t char_before(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t n = 0;
  return utf8_decode(s, start, &n);
}

}  // namespace

std::vector<TextCut> AddedTokens::split(std::string_view text, bool normalized_pass) const {
  std::vector<TextCut> cuts;
  const auto& table = by_first_byte_[normalized_pass ? 1 : 0];
  size_t start_offset = 0;
  if (!table.empty()) {
    for (size_t i = 0; i < text.size();) {
      size_t found = SIZE_MAX;
      for (const size_t k : table[static_cast<unsigned char>(text[i])]) {
        if (text.substr(i).starts_with(match_text_[k])) {
          found = k;
          break;
        }
      }
      if (found == SIZE_MAX) {
        ++i;
        continue;
      }
      const AddedToken& t = tokens_[found];
      size_t start = i, stop = i + match_text_[found].size();
      i = stop;  // matches do not overlap, whatever happens to this one
      if (t.single_word) {
        const bool start_space = start == 0 || !is_word_char(char_before(text, start));
        size_t n = 0;
        const bool stop_space = stop == text.size() || !is_word_char(utf8_decode(text, stop, &n));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t s = start;
        while (s > 0) {
          const char32_t c = char_before(text, s);
          if (!is_white_space(c)) break;
          size_t back = s - 1;
          while (back > 0 && (static_cast<unsigned char>(text[back]) & 0xC0) == 0x80) --back;
          s = back;
        }
        start = std::max(s, start_offset);
      }
      if (t.rstrip) {
        while (stop < text.size()) {
          size_t n = 0;
          if (!is_white_space(utf8_decode(text, stop, &n))) break;
          stop += n;
        }
      }
      if (start_offset < start) cuts.push_back({start_offset, start, -1});
      cuts.push_back({start, stop, t.id});
      start_offset = stop;
    }
  }
  if (start_offset < text.size()) cuts.push_back({start_offset, text.size(), -1});
  return cuts;
}

const AddedToken* AddedTokens::by_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

}  // namespace qtrain::engine::text
