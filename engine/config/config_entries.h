// Collecting a run config's entries: the one YAML document of a file, its top-level pairs and
// the --set arguments, each classified as a key qtrain reads, an axolotl key it refuses or
// ignores, or an unknown key, before any value is read.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/config/yaml_place.h"

namespace qtrain::engine::config {

// The pairs of a map, keys checked to be scalars and distinct.
std::vector<Entry> map_entries(const YAML::Node& map, const Origin& origin, const std::string& prefix);

// The top-level entries by key. A --set entry replaces whatever was there; within the file, a key
// written twice (also once at the top and once in bnb_config_kwargs) is an error.
class EntrySet {
 public:
  void add(const std::string& key, Entry entry);

  // Classifies one top-level pair (see Note [Recognised axolotl keys]).
  void add_top_level(Entry entry);

  std::map<std::string, Entry>& entries() { return entries_; }
  // The performance switches seen, as "key (why)"; see Note [Performance hints].
  const std::vector<std::string>& ignored() const { return ignored_; }

 private:
  void add_bnb_kwargs(const Entry& entry);

  std::map<std::string, Entry> entries_;
  std::vector<std::string> ignored_;
};

// "key=value" from the command line, its value parsed as YAML.
Entry parse_override(const std::string& argument);

// The one YAML document of a file, as a map.
YAML::Node load_document(const std::string& text, const std::string& source);

}  // namespace qtrain::engine::config
