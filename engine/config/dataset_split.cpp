// See dataset_split.h.
#include "engine/config/dataset_split.h"

#include <algorithm>
#include <cmath>
#include <regex>

namespace qtrain::engine::config {

ParsedSplit parse_split(const std::string& split) {
  ParsedSplit out;
  static const std::regex spec(R"(^(\w+)(?:\[(?:(-?[\d_]+)(%)?)?:(?:(-?[\d_]+)(%)?)?\])?(\(([^)]*)\))?$)");
  std::smatch m;
  if (split.find('+') != std::string::npos) {
    out.problem = "'" + split + "' joins several splits, which qtrain does not read; give one, e.g. train[:10%]";
    return out;
  }
  if (!std::regex_match(split, m, spec)) {
    out.problem =
        "'" + split + "' is not a split as datasets writes it; write e.g. train, train[:10%] or train[100:200]";
    return out;
  }
  if (m[1] != "train") {
    out.problem =
        "'" + split + "': a local file has the one split 'train' (as datasets reads it); write e.g. train[:10%]";
    return out;
  }
  if (m[6].matched) {
    out.problem = "'" + split + "': the rounding '" + m[7].str() +
                  "' is not supported; leave it out (percentages round to the closest row)";
    return out;
  }
  out.slice.percent = m[3].matched || m[5].matched;
  // Python's int(): "1_000" is 1000.
  const auto number = [](std::string digits) {
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    return std::stoll(digits);
  };
  try {
    if (m[2].matched) out.slice.from = number(m[2]);
    if (m[4].matched) out.slice.to = number(m[4]);
  } catch (const std::logic_error&) {  // out of range, or "_" alone
    out.problem = "'" + split + "': a bound is out of range";
    return out;
  }
  for (const auto& bound : {out.slice.from, out.slice.to}) {
    if (out.slice.percent && bound && std::abs(*bound) > 100) {
      out.problem = "'" + split + "': percent bounds lie between -100% and 100%";
    }
  }
  return out;
}

std::pair<int64_t, int64_t> split_rows(const SplitSlice& slice, int64_t rows) {
  // Python's round(): halves to even, which nearbyint does in the default rounding mode.
  const auto rows_of = [&](int64_t bound) {
    return slice.percent ? static_cast<int64_t>(std::nearbyint(static_cast<double>(bound) * rows / 100.0)) : bound;
  };
  int64_t from = slice.from ? rows_of(*slice.from) : 0;
  int64_t to = slice.to ? rows_of(*slice.to) : rows;
  if (from < 0) from = std::max<int64_t>(rows + from, 0);
  if (to < 0) to = std::max<int64_t>(rows + to, 0);
  return {std::min(from, rows), std::min(to, rows)};
}

}  // namespace qtrain::engine::config
