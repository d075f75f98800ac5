// The key schema of a run config: the keys qtrain reads, the axolotl keys it recognises and
// refuses (each with the fix its message gives), and the axolotl performance switches it accepts
// and ignores. config_entries.cpp and config_reader_datasets.cpp read a file against these lists;
// docs/CONFIG.md documents them (a test checks that it names every one).
#pragma once

#include <string>
#include <vector>

namespace qtrain::engine::config {

// The keys of RunConfig, in the order of the run config table (Note [Run config table]).
const std::vector<std::string>& run_config_keys();
// axolotl keys that qtrain reads into one of its own: fsdp, fsdp_config and fsdp_version into
// shard_base (See Note [FSDP keys] in run_config.cpp), overrides_of_model_config (the older
// spelling) into model_config. to_yaml writes the key they set.
const std::vector<std::string>& folded_keys();
// axolotl nests the bitsandbytes settings in this map; qtrain reads these keys from it as if they
// were written at the top level.
inline constexpr const char* kBnbKwargs = "bnb_config_kwargs";
const std::vector<std::string>& bnb_kwargs_keys();
// The keys of one `datasets` entry; chat_dataset_keys() are those that apply only to
// type: chat_template.
const std::vector<std::string>& dataset_keys();
const std::vector<std::string>& chat_dataset_keys();
// The keys that apply only to the chat_template.* preference types (field_chosen, field_rejected).
const std::vector<std::string>& preference_dataset_keys();
// The keys of a dataset's `type:` written as a map (type user_defined.default).
const std::vector<std::string>& user_defined_type_keys();
// axolotl's preference dataset types qtrain reads (engine/data/preference_types.h), sorted.
const std::vector<std::string>& preference_dataset_types();

// An axolotl key qtrain does not implement: accepted only with a value that asks for nothing.
struct RefusedKey {
  const char* key;
  const char* fix;
};
const std::vector<RefusedKey>& refused_keys();
const std::vector<RefusedKey>& refused_dataset_keys();
const RefusedKey* find_refused(const std::vector<RefusedKey>& table, const std::string& key);

// An axolotl switch that changes speed, not what is trained: accepted with any value and named in
// RunConfig::ignored_keys. `prefix`: every key that starts with `key` (liger_*). `default_value`:
// a value that asks for what qtrain does anyway, accepted without naming the key.
struct IgnoredKey {
  const char* key;
  const char* why;
  bool prefix = false;
  const char* default_value = nullptr;
};
const std::vector<IgnoredKey>& ignored_keys();
const IgnoredKey* find_ignored(const std::string& key);

// docs/CONFIG.md's tables of these (a test holds the docs equal to them; `qtrain keys` prints them):
// a refused table's "| Key | Fix in the message |" rows, and the ignored keys with one row per run
// of keys that share a reason.
std::string refused_keys_table(const std::vector<RefusedKey>& table);
std::string ignored_keys_table();

}  // namespace qtrain::engine::config
