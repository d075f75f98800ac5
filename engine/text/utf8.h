// UTF-8 helpers with the exact semantics that Hugging Face `tokenizers` (Rust) has: Rust's
// `char::is_whitespace` / regex `\s` (Unicode White_Space), regex `\w`, and
// `String::from_utf8_lossy` (one U+FFFD per maximal invalid subpart).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qtrain::engine::text {

// The length in bytes of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// The code point at `s[i]` (valid UTF-8 assumed; callers validate input once) and its length.
char32_t utf8_decode(std::string_view s, size_t i, size_t* length);
void utf8_append(std::string& out, char32_t c);
// Whether `s` is valid UTF-8 (no surrogates, no overlongs).
bool utf8_valid(std::string_view s);
// The byte offset of the first invalid sequence in `s`, or s.size() when it is valid.
size_t utf8_invalid_at(std::string_view s);
// Rust's String::from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);
// The code point offset of every byte offset 0..s.size() (bytes inside a character map to the
// index of that character).
std::vector<size_t> utf8_char_index(std::string_view s);

// Unicode White_Space: the 25 code points of Rust's char::is_whitespace and regex `\s`.
bool is_white_space(char32_t c);
// Rust regex `\w` (Unicode): letters, marks, decimal numbers, connector punctuation, and the
// other Alphabetic code points (letter numbers), plus ZWJ/ZWNJ.
bool is_word_char(char32_t c);
// Rust char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t c);

}  // namespace qtrain::engine::text
