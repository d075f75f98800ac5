// See pattern.h.
#include "engine/text/pattern.h"

#include <nlohmann/json.hpp>

namespace qtrain::engine::text {

Pattern Pattern::parse(const nlohmann::json& j, const JsonSite& site) {
  Pattern p;
  if (j.is_object() && j.size() == 1 && j.contains("String") && j["String"].is_string()) {
    p.literal_ = j["String"].get<std::string>();
    if (p.literal_.empty()) fail(site, "an empty String pattern matches nowhere useful; give a non-empty string");
    return p;
  }
  if (j.is_object() && j.size() == 1 && j.contains("Regex") && j["Regex"].is_string()) {
    try {
      p.regex_ = std::make_shared<const Regex>(j["Regex"].get<std::string>());
    } catch (const TokenizerError& e) {
      fail(site, e.what());
    }
    return p;
  }
  fail(site, "expected {\"String\": \"...\"} or {\"Regex\": \"...\"}, got " + j.dump());
}

std::vector<Match> Pattern::find_all(std::string_view text) const {
  if (regex_) return regex_->find_all(text);
  std::vector<Match> matches;
  for (size_t i = text.find(literal_); i != std::string_view::npos; i = text.find(literal_, i + literal_.size())) {
    matches.emplace_back(i, i + literal_.size());
  }
  return matches;
}

}  // namespace qtrain::engine::text
