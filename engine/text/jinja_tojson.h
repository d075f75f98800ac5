// The `tojson` filter of transformers' chat-template environment: Python's
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False), byte for byte.
//
// Note [tojson is json.dumps]
// transformers replaces Jinja's HTML-escaping tojson with json.dumps, so templates print
// `{"a": "é<", "b": [1, 2.0]}`: ", " and ": " separators without indent, "," and ": " with
// indent (then a newline and the indent per level), keys in insertion order, non-ASCII kept
// as is (ensure_ascii=False), floats in Python's repr form (1.0, 1e-07), NaN/Infinity as
// Python writes them, and only the escapes \" \\ \n \r \t \b \f and \u00XX for the other
// control characters. Tuples are written as lists; Undefined is an error (not serializable).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "engine/text/jinja_value.h"

namespace qtrain::engine::text {

struct JsonDumpOptions {
  // None: one line. A number n: n spaces per level; a string: that string per level.
  std::optional<std::string> indent;
  bool ensure_ascii = false;
  bool sort_keys = false;
  // Item and key separators; by default ", " and ": " (indent: "," and ": ").
  std::optional<std::pair<std::string, std::string>> separators;
};

std::string json_dumps(const Value& v, const JsonDumpOptions& options = {});

}  // namespace qtrain::engine::text
