// See json_depth.h.
#include "engine/text/json_depth.h"

#include <algorithm>

namespace qtrain::engine::text {

std::string json_depth_problem(std::string_view json) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth <= kMaxJsonDepth) continue;
      const auto line_start = json.rfind('\n', i);
      const size_t line = 1 + std::count(json.begin(), json.begin() + i, '\n');
      const size_t column = i - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
      return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": JSON nested more than " +
             std::to_string(kMaxJsonDepth) +
             " levels deep; no real file is, so this one is damaged (qtrain refuses it)";
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return {};
}

}  // namespace qtrain::engine::text
