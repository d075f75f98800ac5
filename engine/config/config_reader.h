// Reading the collected entries of a run config by key: typed reads with their ranges and fixes
// (config_reader.cpp) and the entries of `datasets` (config_reader_datasets.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config_problems.h"
#include "engine/config/run_config.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

// Reads the collected entries by key, with their types and ranges. Absent and null values give
// the default. Every entry must be read exactly once (an internal check), so a known key that
// nothing reads cannot be dropped silently.
class Reader {
 public:
  Reader(std::map<std::string, Entry>& entries, std::string source, std::filesystem::path base_dir, Problems& problems)
      : entries_(entries), source_(std::move(source)), base_dir_(std::move(base_dir)), problems_(problems) {}

  // See Note [Every problem at once]: `check` reads or checks `keys`; a problem is recorded.
  template <class F>
  void guard(const std::vector<std::string>& keys, F&& check) {
    problems_.guard(keys, std::forward<F>(check));
  }

  // The entry of `key` when it is present with a non-null value.
  const Entry* find(const std::string& key);
  // Present at all, even null.
  const Entry* find_written(const std::string& key) const;
  // Where `key` was written, or the file as a whole for a default.
  std::string place_of(const std::string& key) const;

  void check_all_read() const;

  // The typed reads below give `fallback` for an absent key, and also for a value that fails
  // (the problem is recorded; see Note [Every problem at once]).
  bool boolean(const std::string& key, bool fallback);
  int64_t integer(const std::string& key, int64_t fallback, Range range, const std::string& fix);
  double number(const std::string& key, double fallback, Range range, const std::string& fix);
  double number_of(const Entry& e, Range range, const std::string& fix) const;
  // A list of numbers, each in `range` (one number reads as a list of one); absent: empty.
  std::vector<double> numbers(const std::string& key, Range range, const std::string& fix);

  // One of `allowed`; `aliases` maps other accepted spellings to their value in `allowed`.
  std::string choice(const std::string& key,
                     const std::string& fallback,
                     const std::vector<std::string>& allowed,
                     const std::string& fix = "",
                     const std::map<std::string, std::string>& aliases = {});

  // A path, resolved against the config's directory; "" or absent gives `fallback` (resolved too).
  std::filesystem::path path(const std::string& key, const std::filesystem::path& fallback);
  std::vector<std::string> strings(const std::string& key, const std::string& example);
  std::string text(const std::string& key, const std::string& example);
  std::vector<std::string> module_names(const std::string& key);
  // lora_target_modules: a list of module names (module_names_of), or one string, which PEFT reads
  // as a regular expression that a module's whole name must match. At most one of the two is set.
  struct ModuleTargets {
    std::vector<std::string> names;
    std::string regex;
  };
  ModuleTargets module_targets(const std::string& key);
  std::vector<DatasetConfig> datasets(const std::string& key);

  std::vector<std::string> module_names_of(const Entry& e) const;
  // A non-empty string, or a list of them (one string reads as a list of one).
  std::vector<std::string> strings_of(const Entry& e, const std::string& example) const;
  // A string; "" (as to_yaml writes an unset one) reads as unset.
  std::string text_of(const Entry& e, const std::string& example) const;
  bool boolean_of(const Entry& e) const;
  int64_t integer_of(const Entry& e, Range range, const std::string& fix) const;
  std::string choice_of(const Entry& e,
                        const std::vector<std::string>& allowed,
                        const std::string& fix,
                        const std::map<std::string, std::string>& aliases) const;
  std::filesystem::path path_of(const Entry& e) const;
  std::filesystem::path resolve(const std::filesystem::path& p) const;

 private:
  template <class T, class F>
  T guarded(const std::string& key, T fallback, F&& read) {
    T value = std::move(fallback);
    guard({key}, [&] { value = read(); });
    return value;
  }

  DatasetConfig dataset(const Entry& list, size_t index) const;
  // A dataset's `type:` written as a map (type user_defined.default).
  UserDefinedType user_defined_type(const Entry& type) const;
  // See Note [Dataset files].
  void check_local_file(const Entry& e, const std::filesystem::path& resolved) const;
  static std::string conversion_hint(const std::filesystem::path& path, const std::string& format);
  // The type chat_template keys of a dataset entry; see DatasetConfig.
  template <class ValueOf>
  void read_chat_keys(DatasetConfig& d, const ValueOf& value_of) const;

  std::map<std::string, Entry>& entries_;
  std::set<std::string> read_;
  std::string source_;
  std::filesystem::path base_dir_;
  Problems& problems_;
};

}  // namespace qtrain::engine::config
