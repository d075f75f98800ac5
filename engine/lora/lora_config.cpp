// See lora_config.h.
#include "engine/lora/lora_config.h"

#include <regex>

namespace qtrain::engine::lora {

bool LoraConfig::matches_regex(const std::string& pattern, const std::string& path) {
  return std::regex_match(path, std::regex(pattern, std::regex::ECMAScript));
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
