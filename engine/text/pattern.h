// The `pattern` of Split, Replace (normalizer and decoder): {"String": s} or {"Regex": r}.
// HF compiles a String as the escaped literal; a literal search finds the same non-overlapping,
// leftmost matches.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/regex.h"
#include "engine/text/text_error.h"

namespace qtrain::engine::text {

class Pattern {
 public:
  static Pattern parse(const nlohmann::json& j, const JsonSite& site);
  std::vector<Match> find_all(std::string_view text) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a String pattern
};

}  // namespace qtrain::engine::text
