// See jinja_pystr.h.
#include "engine/text/jinja_pystr.h"

#include <algorithm>

#include <utf8proc.h>

#include "engine/text/jinja_args.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {

using namespace jinja_detail;

uint32_t python_code_point(std::string_view ch) {
  const auto c = static_cast<unsigned char>(ch[0]);
  if (c < 0x80) return c;
  const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
  uint32_t cp = c & (0x3F >> extra);
  for (size_t i = 1; i < ch.size(); ++i) cp = (cp << 6) | (static_cast<unsigned char>(ch[i]) & 0x3F);
  return cp;
}

bool python_is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Simple case mappings plus Python's 'ß' (upper "SS", title "Ss"); see jinja_pystr.h.
enum class Case { upper, lower, title };

void append_cased(std::string& out, uint32_t cp, Case c) {
  if (cp == 0xDF && c != Case::lower) {
    out += c == Case::upper ? "SS" : "Ss";
    return;
  }
  const auto u = static_cast<utf8proc_int32_t>(cp);
  utf8_append(out,
              static_cast<uint32_t>(c == Case::upper   ? utf8proc_toupper(u)
                                    : c == Case::lower ? utf8proc_tolower(u)
                                                       : utf8proc_totitle(u)));
}

std::string map_case(const std::string& s, Case c) {
  std::string out;
  out.reserve(s.size());
  for (auto ch : utf8_split_chars(s)) append_cased(out, python_code_point(ch), c);
  return out;
}

// Python's "cased" characters: letters with case (Lu, Ll, Lt).
bool is_cased(uint32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string python_upper(const std::string& s) {
  return map_case(s, Case::upper);
}
std::string python_lower(const std::string& s) {
  return map_case(s, Case::lower);
}

bool python_is_case(const std::string& s, bool lower) {
  bool any = false;
  for (auto ch : utf8_split_chars(s)) {
    const auto cp = static_cast<utf8proc_int32_t>(python_code_point(ch));
    if (!is_cased(static_cast<uint32_t>(cp))) continue;
    any = true;
    const auto cat = utf8proc_category(cp);
    if (lower ? cat != UTF8PROC_CATEGORY_LL : cat != UTF8PROC_CATEGORY_LU) return false;
  }
  return any;
}

// Python str.title(): a cased character after a cased one is lowered, any other title-cased.
std::string python_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (auto ch : utf8_split_chars(s)) {
    const uint32_t cp = python_code_point(ch);
    append_cased(out, cp, prev_cased ? Case::lower : Case::title);
    prev_cased = is_cased(cp);
  }
  return out;
}

// Python str.capitalize(): the first character title-cased, the rest lowered.
std::string python_capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (auto ch : utf8_split_chars(s)) {
    append_cased(out, python_code_point(ch), first ? Case::title : Case::lower);
    first = false;
  }
  return out;
}

// jinja2's `title` filter: words start after '-', whitespace, '(', '{', '[' or '<'; each
// word's first character is upper-cased and the rest lowered.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (auto ch : utf8_split_chars(s)) {
    const uint32_t cp = python_code_point(ch);
    const bool delimiter = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || python_is_space(cp);
    if (delimiter) {
      out += ch;
      word_start = true;
    } else {
      append_cased(out, cp, word_start ? Case::upper : Case::lower);
      word_start = false;
    }
  }
  return out;
}

std::vector<std::string> python_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {
    const auto chars = utf8_split_chars(s);
    size_t i = 0;
    while (i < chars.size()) {
      while (i < chars.size() && python_is_space(python_code_point(chars[i]))) ++i;
      if (i == chars.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        // The rest, trailing whitespace included, is the last item (as Python does).
        std::string rest;
        for (size_t k = i; k < chars.size(); ++k) rest += chars[k];
        out.push_back(std::move(rest));
        return out;
      }
      std::string word;
      while (i < chars.size() && !python_is_space(python_code_point(chars[i]))) word += chars[i++];
      out.push_back(std::move(word));
    }
    return out;
  }
  const std::string& d = need_string(sep, "the separator of split()");
  if (d.empty()) fail("split(): empty separator");
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t hit = s.find(d, start);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(start, hit - start));
    start = hit + d.size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::string python_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` around every character
    int64_t n = 0;
    for (auto ch : utf8_split_chars(s)) {
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
      out += ch;
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(old, start);
    if (hit == std::string::npos) break;
    out += s.substr(start, hit - start);
    out += with;
    start = hit + old.size();
    ++n;
  }
  out += s.substr(start);
  return out;
}

std::string python_strip(const std::string& s, const Value& chars, char which) {
  const auto cs = utf8_split_chars(s);
  std::vector<std::string_view> set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) {
    for (auto c : utf8_split_chars(need_string(chars, "the characters to strip"))) set.push_back(c);
  }
  auto strip_it = [&](std::string_view c) {
    return whitespace ? python_is_space(python_code_point(c)) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cs.size();
  if (which != 'r') {
    while (b < e && strip_it(cs[b])) ++b;
  }
  if (which != 'l') {
    while (e > b && strip_it(cs[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

}  // namespace qtrain::engine::text
