// Where a run config value was written (a place in the file, or a --set argument), one
// `key: value` entry with its place, and the pieces every config message is built from. Every
// message has the form `<place>: <key>: <problem>; <fix>`.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

namespace qtrain::engine::config {

// Where a value was written: a place in the file, or a --set argument. A --set value is YAML the
// user typed on one line, so its own line:col would mislead; the argument itself is named.
class Origin {
 public:
  static Origin file(const std::string& source) { return Origin(source, ""); }
  static Origin set_argument(const std::string& argument) { return Origin("", argument); }

  bool is_set_argument() const { return !argument_.empty(); }
  // The file (or the argument) as a whole.
  std::string whole() const { return is_set_argument() ? "--set " + argument_ : source_; }
  // yaml-cpp's marks are 0-based; editors count from 1.
  std::string at(const YAML::Mark& mark) const {
    if (is_set_argument() || mark.line < 0) {
      return whole();
    }
    return source_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  }

 private:
  Origin(std::string source, std::string argument) : source_(std::move(source)), argument_(std::move(argument)) {}
  std::string source_;
  std::string argument_;
};

// Throws the config error `<place>: <key>: <message>`.
[[noreturn]] void fail(const std::string& place, const std::string& key, const std::string& message);

// One `key: value` pair and where it was written.
struct Entry {
  std::string key;  // as the user wrote it, e.g. "datasets[0].type" or "bnb_config_kwargs.llm_int8_threshold"
  YAML::Node key_node;
  YAML::Node value;
  Origin origin = Origin::file("");

  std::string key_place() const { return origin.at(key_node.Mark()); }
  // A null value has the mark of the token after it; the key is the better place.
  std::string value_place() const { return value.IsNull() ? key_place() : origin.at(value.Mark()); }
  [[noreturn]] void fail_value(const std::string& message) const { fail(value_place(), key, message); }
};

// How a value looks in a message: scalars quoted as written, other nodes by kind.
std::string shown(const YAML::Node& node);

std::string join(const std::vector<std::string>& items, const std::string& separator);

}  // namespace qtrain::engine::config
