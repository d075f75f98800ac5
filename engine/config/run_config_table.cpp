// See run_config_table.h and Note [Run config table] there.
#include "engine/config/run_config_table.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace qtrain::engine::config {

const std::vector<RunConfigKey>& run_config_table() {
  static const std::vector<RunConfigKey> table = [] {
    std::vector<RunConfigKey> all;
    for (auto section :
         {model_keys, lora_keys, data_keys, optimisation_keys, preference_keys, memory_keys, output_keys}) {
      auto keys = section();
      all.insert(all.end(), std::make_move_iterator(keys.begin()), std::make_move_iterator(keys.end()));
    }
    return all;
  }();
  return table;
}

std::vector<std::string> run_config_sections() {
  std::vector<std::string> sections;
  for (const auto& k : run_config_table()) {
    if (std::find(sections.begin(), sections.end(), k.section) == sections.end()) sections.push_back(k.section);
  }
  return sections;
}

std::string run_config_key_table(const std::string& section, const std::string& key) {
  std::string out = "| Key | Type | Default | Source | Meaning |\n|---|---|---|---|---|\n";
  bool any = false;
  for (const auto& k : run_config_table()) {
    if (k.section != section || (!key.empty() && k.name != key)) continue;
    out += "| `" + k.name + "` | " + k.type + " | " + k.default_value + " | " + k.source + " | " + k.meaning + " |\n";
    any = true;
  }
  TORCH_CHECK(any, "run_config_key_table: no keys in section '", section, "'");
  return out;
}

}  // namespace qtrain::engine::config
