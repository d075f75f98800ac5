// See yaml_place.h.
#include "engine/config/yaml_place.h"

#include <c10/util/Exception.h>

#include <cstdlib>

namespace qtrain::engine::config {

[[noreturn]] void fail(const std::string& place, const std::string& key, const std::string& message) {
  TORCH_CHECK(false, place, ": ", key, ": ", message);
  std::abort();  // not reached; TORCH_CHECK(false, ...) throws
}

std::string shown(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "" : separator) + items[i];
  }
  return out;
}

}  // namespace qtrain::engine::config
