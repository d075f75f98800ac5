// The run config's keys in one table. See Note [Run config table].
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/config/config_reader.h"
#include "engine/config/run_config.h"

namespace qtrain::engine::config {

// Note [Run config table]
// Every key of RunConfig is one entry here, in the order of the header, of to_yaml and of
// docs/CONFIG.md: its name, the docs section that lists it, its type, default and source as the
// docs show them, what it means, how it is read and checked, and how to_yaml writes its value.
// The keys a config may hold (run_config_keys), the reader (read_config reads the keys in table
// order, so a key's checks may look at the keys before it), to_yaml, and docs/CONFIG.md's key
// tables (run_config_key_table, which a test holds equal to the docs and `qtrain keys` prints) all
// come from here: a key is added in one place. What stays in run_config.cpp are the checks of
// combinations that name several keys, and axolotl's FSDP keys, which are read into shard_base.
// The entries live in one file per docs section, run_config_table_<section>.cpp.
struct RunConfigKey {
  std::string name;
  std::string section;
  std::string type;
  std::string default_value;
  std::string source;  // axolotl, qtrain or BnB (docs/CONFIG.md says what each means)
  std::string meaning;
  // Reads the key (named `key`) into the config, with its type, range and its checks against the
  // keys before it in the table; problems go to the reader (every one is reported at once).
  std::function<void(Reader& r, RunConfig& c, const std::string& key)> read;
  // The value as to_yaml writes it after "name:": one line, or a block that starts with "\n".
  std::function<std::string(const RunConfig&)> yaml;
};

const std::vector<RunConfigKey>& run_config_table();
// The docs sections of the keys, in table order.
std::vector<std::string> run_config_sections();
// docs/CONFIG.md's markdown table of the keys of `section` (only `key`'s row when given).
std::string run_config_key_table(const std::string& section, const std::string& key = "");

// The entries of each section (run_config_table_<section>.cpp).
std::vector<RunConfigKey> model_keys();
std::vector<RunConfigKey> lora_keys();
std::vector<RunConfigKey> data_keys();
std::vector<RunConfigKey> optimisation_keys();
std::vector<RunConfigKey> preference_keys();
std::vector<RunConfigKey> memory_keys();
std::vector<RunConfigKey> output_keys();

// The value of `datasets` as to_yaml writes it (run_config_yaml.cpp).
std::string datasets_yaml(const std::vector<DatasetConfig>& datasets);

}  // namespace qtrain::engine::config
