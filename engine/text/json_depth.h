// A guard against JSON nested so deeply that working with the parsed value overflows the stack:
// nlohmann's parser is iterative, but dump(), copies and comparisons recurse once per level, so a
// 200 KB file of '[' parses and then crashes the first error message that prints it. Every
// parser of outside JSON (config.json, safetensors headers, tokenizer.json, adapters, dataset
// rows, run state) checks the text first.
#pragma once

#include <string>
#include <string_view>

namespace qtrain::engine::text {

// Deeper than the 128 levels of serde_json (which reads tokenizer.json and safetensors headers
// for the Python stack) and far beyond any real file; small enough for an 8 MB thread stack.
inline constexpr int kMaxJsonDepth = 256;

// Empty when `json` opens at most kMaxJsonDepth arrays/objects inside one another (outside
// strings); otherwise where the limit is passed and why, for the caller to prefix with the file:
// "line 1, column 257: JSON nested more than 256 levels deep; ...". Checks nothing else: the
// parser does that.
std::string json_depth_problem(std::string_view json);

}  // namespace qtrain::engine::text
