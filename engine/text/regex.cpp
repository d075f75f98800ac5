// See regex.h.
#include "engine/text/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "engine/text/text_error.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {

// Note [Regex engine]
// The pre-tokenizer regexes of real tokenizer.json files (the Llama 3 / Qwen / Tekken splits
// and the GPT-2 pattern) use \p{L}, \p{N}, scoped (?i:...) with Unicode case folding ('ſ
// matches 's), {1,3} and the lookahead \s+(?!\S). HF runs them with Oniguruma, so qtrain does
// too, with the same syntax and options; RE2 cannot express the lookahead and std::regex has
// no Unicode classes. Debian's Oniguruma 6.9.8 has Unicode 14 tables while HF's bundled copy
// has Unicode 16: code points assigned in Unicode 15/16 may split differently (documented in
// docs/DATA.md). Matching follows the onig crate's FindMatches, including its rule for empty
// matches, so pieces are identical to HF's `Split`.

namespace {
std::once_flag onig_ready;
}

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  std::call_once(onig_ready, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  OnigRegex regex = nullptr;
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc =
      onig_new(&regex, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    throw TokenizerError("Oniguruma cannot compile the regex '" + pattern +
                         "': " + reinterpret_cast<const char*>(message));
  }
  regex_ = regex;
}

Regex::~Regex() {
  if (regex_ != nullptr) onig_free(static_cast<OnigRegex>(regex_));
}

std::vector<Match> Regex::find_all(std::string_view text) const {
  std::vector<Match> matches;
  auto* regex = static_cast<OnigRegex>(regex_);
  OnigRegion* region = onig_region_new();
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= text.size()) {
    const int r = onig_search(regex, begin, end, begin + last_end, end, region, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) {
      onig_region_free(region, 1);
      OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(message, r);
      throw TokenizerError("Oniguruma failed matching the regex '" + pattern_ +
                           "': " + reinterpret_cast<const char*>(message));
    }
    const auto s = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    if (s == e && have_last && last_match_end == e) {
      last_end += last_end < text.size() ? utf8_length(static_cast<unsigned char>(text[last_end])) : 1;
      continue;
    }
    last_end = e;
    last_match_end = e;
    have_last = true;
    matches.emplace_back(s, e);
  }
  onig_region_free(region, 1);
  return matches;
}

}  // namespace qtrain::engine::text
