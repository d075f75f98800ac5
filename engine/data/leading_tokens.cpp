// See leading_tokens.h.
#include "engine/data/leading_tokens.h"

#include <algorithm>

namespace qtrain::engine::data {
namespace {

// Note [Leading tokens]
// A text longer than leading_prefix_bytes(max_tokens) is tokenized in prefixes: the first K
// bytes, then 2K, 4K, ... Tokenizers are local: normalizers map characters one by one, the
// pre-tokenizer splits on nearby characters, and BPE or WordPiece then work inside one pre-token,
// so a token far before the end of a prefix is the one the whole text gives. The tokens of a
// prefix whose byte spans end kLeadingMargin bytes or more before its end are taken as settled,
// and they are used once two prefixes in a row (K and 2K) give the same first max_tokens + 1 of
// them: a pre-token long enough to straddle both cuts would change them, so the check catches
// it and the doubling goes on. At worst the prefixes reach the whole text, which then costs at
// most three times its plain tokenization; a 100 MB row of ordinary text with a 2048-token window
// costs the tokenization of its first 36,880 and 73,760 bytes.

// The largest cut <= `at` that starts a UTF-8 character, so the prefix is valid text.
size_t char_start_at_or_before(std::string_view text, size_t at) {
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return at;
}

// The leading tokens of `t` whose spans end at or before `settled_end` (tokens the tokenizer
// added, with {0, 0} spans, count as settled).
size_t settled_count(const TokenizedText& t, size_t settled_end) {
  size_t n = 0;
  while (n < t.ids.size() && t.spans[n].second <= settled_end) ++n;
  return n;
}

bool same_leading(const TokenizedText& a, const TokenizedText& b, size_t n) {
  return std::equal(a.ids.begin(), a.ids.begin() + n, b.ids.begin()) &&
         std::equal(a.spans.begin(), a.spans.begin() + n, b.spans.begin());
}

}  // namespace

size_t leading_prefix_bytes(size_t max_tokens) {
  return (max_tokens + 1) * kLeadingBytesPerToken + kLeadingMargin;
}

TokenizedText tokenize_leading(
    const TextTokenizer& tokenizer, std::string_view text, bool add_special_tokens, size_t max_tokens, bool* cut) {
  if (cut) *cut = false;
  const size_t want = max_tokens + 1;
  TokenizedText previous;
  size_t previous_settled = 0;
  for (size_t k = leading_prefix_bytes(max_tokens); k < text.size(); k *= 2) {
    const size_t end = char_start_at_or_before(text, k);
    TokenizedText t = tokenizer.tokenize(text.substr(0, end), add_special_tokens);
    const size_t settled = end > kLeadingMargin ? settled_count(t, end - kLeadingMargin) : 0;
    if (settled >= want && previous_settled >= want && same_leading(t, previous, want)) {
      t.ids.resize(want);
      t.spans.resize(want);
      if (cut) *cut = true;
      return t;
    }
    previous = std::move(t);
    previous_settled = settled;
  }
  return tokenizer.tokenize(text, add_special_tokens);
}

}  // namespace qtrain::engine::data
