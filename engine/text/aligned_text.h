// Text that remembers where each of its bytes came from in the original input: HF's
// NormalizedString, reduced to what qtrain needs (token offsets into the text the user gave).
// Normalizers and pre-tokenizers rewrite it; every output byte keeps the original byte range of
// the character it was made from, so a token's offsets are [align[first].begin,
// align[last].end).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qtrain::engine::text {

// A byte range [begin, end) of the original input.
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
};

struct AlignedText {
  std::string text;
  std::vector<Span> align;  // one per byte of `text`

  // original[begin, end) as it is, each byte aligned to the character that holds it.
  static AlignedText original(std::string_view whole, size_t begin, size_t end);

  bool empty() const { return text.empty(); }
  AlignedText slice(size_t begin, size_t end) const;
  // The original range of text bytes [begin, end) (non-empty).
  Span span(size_t begin, size_t end) const { return {align[begin].begin, align[end - 1].end}; }
  void append(std::string_view s, Span from);
  void append(const AlignedText& other, size_t begin, size_t end);
};

}  // namespace qtrain::engine::text
