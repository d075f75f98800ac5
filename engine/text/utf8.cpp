// See utf8.h.
#include "engine/text/utf8.h"

#include <utf8proc.h>

namespace qtrain::engine::text {

char32_t utf8_decode(std::string_view s, size_t i, size_t* length) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_length(b0);
  *length = n;
  if (n == 1) return b0;
  char32_t c = b0 & (0xFF >> (n + 1));
  for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return c;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 with `*bad` = the length of the maximal
// subpart of a valid sequence there (at least 1): the unit that from_utf8_lossy replaces.
size_t valid_sequence(std::string_view s, size_t i, size_t* bad) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *bad = 1;
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      *bad = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *bad = k;
      return 0;
    }
  }
  return n;
}

}  // namespace

size_t utf8_invalid_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    const size_t n = valid_sequence(s, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

bool utf8_valid(std::string_view s) {
  return utf8_invalid_at(s) == s.size();
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t bad = 0;
    const size_t n = valid_sequence(bytes, i, &bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

std::vector<size_t> utf8_char_index(std::string_view s) {
  std::vector<size_t> index(s.size() + 1);
  size_t chars = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(s[i])), s.size() - i);
    for (size_t k = 0; k < n; ++k) index[i + k] = chars;
    i += n;
    ++chars;
  }
  index[s.size()] = chars;
  return index;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

}  // namespace qtrain::engine::text
