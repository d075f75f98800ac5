// See lora_config.h.
#include "engine/lora/lora_config.h"

#include <regex>

namespace qtrain::engine::lora {

bool LoraConfig::matches_regex(const std::string& pattern, const std::string& path) {
  return std::regex_match(path, std::regex(pattern, std::regex::ECMAScript));
}

namespace {

// peft's get_pattern_key: the first key with re.match(rf"(.*\.)?({key})$", path).
template <class Value>
const Value* pattern_value(const std::vector<std::pair<std::string, Value>>& pattern, const std::string& path) {
  for (const auto& [key, value] : pattern) {
    if (std::regex_match(path, std::regex("(.*\\.)?(" + key + ")", std::regex::ECMAScript))) return &value;
  }
  return nullptr;
}

}  // namespace

int64_t LoraConfig::rank_for(const std::string& path) const {
  const int64_t* v = pattern_value(rank_pattern, path);
  return v ? *v : r;
}

double LoraConfig::alpha_for(const std::string& path) const {
  const double* v = pattern_value(alpha_pattern, path);
  return v ? *v : alpha;
}

LoraConfig LoraConfig::for_module(const std::string& path) const {
  LoraConfig c = *this;
  c.r = rank_for(path);
  c.alpha = alpha_for(path);
  c.rank_pattern.clear();
  c.alpha_pattern.clear();
  return c;
}

std::string LoraConfig::regex_problem(const std::string& pattern) {
  try {
    std::regex(pattern, std::regex::ECMAScript);
    return "";
  } catch (const std::regex_error& e) {
    return "'" + pattern + "' is not a regular expression qtrain can read (" + e.what() +
           "). qtrain reads ECMAScript syntax, which has Python's common one but not its (?P<name>...) groups or "
           "look-behind; rewrite the pattern, or list module names such as [q_proj, v_proj]";
  }
}

}  // namespace qtrain::engine::lora
