// Python's str semantics that templates observe: whitespace (str.isspace), case mapping,
// strip/split/replace, over UTF-8 strings counted in code points.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/jinja_value.h"

namespace qtrain::engine::text {

// The code point of one UTF-8 character (as utf8_split_chars returns them).
uint32_t python_code_point(std::string_view ch);
// Python's str.isspace() for one code point.
bool python_is_space(uint32_t cp);

// str.upper(), str.lower(), str.title(), str.capitalize(): Unicode's simple case mappings
// (utf8proc) plus Python's 'ß' -> "SS"; Python's other multi-character mappings and its
// final-sigma rule are not reproduced.
std::string python_upper(const std::string& s);
std::string python_lower(const std::string& s);
std::string python_title(const std::string& s);
std::string python_capitalize(const std::string& s);
// str.islower() (lower = true) or str.isupper(): at least one cased character, none of the other case.
bool python_is_case(const std::string& s, bool lower);
// jinja2's `title` filter, which differs from str.title(): words start after '-', whitespace,
// '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s);

// str.strip(chars) family: which = 'l', 'r' or 'b' (both); chars None/Undefined = whitespace.
std::string python_strip(const std::string& s, const Value& chars, char which);
// str.split(sep, maxsplit): sep None/Undefined splits on runs of whitespace.
std::vector<std::string> python_split(const std::string& s, const Value& sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0: all.
std::string python_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count);

}  // namespace qtrain::engine::text
