// See aligned_text.h.
#include "engine/text/aligned_text.h"

#include <algorithm>

#include "engine/text/utf8.h"

namespace qtrain::engine::text {

AlignedText AlignedText::original(std::string_view whole, size_t begin, size_t end) {
  AlignedText t;
  t.text.assign(whole.substr(begin, end - begin));
  t.align.resize(t.text.size());
  for (size_t i = begin; i < end;) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(whole[i])), end - i);
    const Span s{static_cast<uint32_t>(i), static_cast<uint32_t>(i + n)};
    for (size_t k = 0; k < n; ++k) t.align[i - begin + k] = s;
    i += n;
  }
  return t;
}

AlignedText AlignedText::slice(size_t begin, size_t end) const {
  AlignedText t;
  t.append(*this, begin, end);
  return t;
}

void AlignedText::append(std::string_view s, Span from) {
  text.append(s);
  align.insert(align.end(), s.size(), from);
}

void AlignedText::append(const AlignedText& other, size_t begin, size_t end) {
  text.append(other.text, begin, end - begin);
  align.insert(align.end(), other.align.begin() + begin, other.align.begin() + end);
}

}  // namespace qtrain::engine::text
