// See run_config.h. Reading goes in three passes: collect the top-level keys of the file and of
// the --set arguments (classifying each as known, unsupported-axolotl or unknown, and remembering
// where it was written), read each known key with its type and range, then check the
// combinations. Every message has the form `<place>: <key>: <problem>; <fix>`.
#include "engine/config/run_config.h"

#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "engine/config/byte_size.h"
#include "engine/config/config_keys.h"
#include "engine/text/named_chat_template.h"

namespace qtrain::engine::config {
namespace {

namespace fs = std::filesystem;

namespace fs = std::filesystem;

// --- places and messages ---------------------------------------------------------------------

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

[[noreturn]] void fail(const std::string& place, const std::string& key, const std::string& message) {
  TORCH_CHECK(false, place, ": ", key, ": ", message);
  std::abort();  // not reached; TORCH_CHECK(false, ...) throws
}

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

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The closest candidate within max(2, len/3) edits; the first in list order wins a tie.
std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string unknown_key_message(const std::string& key, const std::vector<std::string>& candidates) {
  const auto suggestion = nearest(key, candidates);
  if (suggestion) {
    return "unknown key '" + key + "'; did you mean '" + *suggestion + "'?";
  }
  return "unknown key '" + key + "'; the keys are listed in docs/CONFIG.md";
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "" : separator) + items[i];
  }
  return out;
}

// --- scalars ---------------------------------------------------------------------------------

// The YAML 1.1 booleans, as PyYAML (and so axolotl) reads them.
std::optional<bool> parse_bool(const std::string& s) {
  static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  if (yes.contains(s)) {
    return true;
  }
  if (no.contains(s)) {
    return false;
  }
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (end - begin >= 2 && *begin == '+' && begin[1] != '-') {
    ++begin;
  }
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end || begin == end) {
    return std::nullopt;
  }
  return v;
}

// Decimal and exponent forms, including `2e-4`, which PyYAML leaves a string but axolotl (through
// pydantic) reads as a number. Infinities and NaN are refused.
std::optional<double> parse_double(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (end - begin >= 2 && *begin == '+' && begin[1] != '-') {
    ++begin;
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end || begin == end || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

// The shortest text that reads back to the same double.
std::string format_double(double v) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  TORCH_INTERNAL_ASSERT(ec == std::errc());
  return std::string(buffer, ptr);
}

// A value that asks for nothing: see Note [Recognised axolotl keys].
bool is_off(const YAML::Node& v) {
  if (v.IsNull()) {
    return true;
  }
  if (v.IsScalar()) {
    return v.Scalar().empty() || parse_bool(v.Scalar()) == false;
  }
  return v.size() == 0;
}

// A value below lo (or at an open lo) or above hi (or at an open hi) is out of range.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string problem(const std::string& value) const {
    if (std::isinf(hi)) {
      return value + " must be " + (lo_open ? "> " : ">= ") + format_double(lo);
    }
    return value + " is outside " + (lo_open ? "(" : "[") + format_double(lo) + ", " + format_double(hi) +
           (hi_open ? ")" : "]");
  }
};

Range at_least(double lo) {
  return Range{.lo = lo};
}
Range above(double lo) {
  return Range{.lo = lo, .lo_open = true};
}
Range unit_interval_open() {
  return Range{.lo = 0, .hi = 1, .hi_open = true};
}

// --- collecting entries ----------------------------------------------------------------------

// The pairs of a map, keys checked to be scalars and distinct.
std::vector<Entry> map_entries(const YAML::Node& map, const Origin& origin, const std::string& prefix) {
  std::vector<Entry> out;
  std::map<std::string, YAML::Mark> seen;
  // By value: yaml-cpp's iterator hands out its pairs as temporaries.
  for (const auto& pair : map) {
    const YAML::Node key = pair.first;
    if (!key.IsScalar()) {
      fail(origin.at(key.Mark()),
           prefix.empty() ? "(key)" : prefix,
           "a key must be a plain name, got " + shown(key) + "; write `name: value`");
    }
    const std::string name = key.Scalar();
    const auto [previous, inserted] = seen.emplace(name, key.Mark());
    if (!inserted) {
      fail(origin.at(key.Mark()),
           prefix + name,
           "duplicate key (first at " + origin.at(previous->second) + "); keep one of them");
    }
    out.push_back(Entry{prefix + name, key, pair.second, origin});
  }
  return out;
}

// The top-level entries by key. A --set entry replaces whatever was there; within the file, a key
// written twice (also once at the top and once in bnb_config_kwargs) is an error.
class EntrySet {
 public:
  void add(const std::string& key, Entry entry) {
    const auto it = entries_.find(key);
    if (it != entries_.end() && !entry.origin.is_set_argument()) {
      fail(entry.key_place(),
           entry.key,
           "duplicate key (first as " + it->second.key + " at " + it->second.key_place() + "); keep one of them");
    }
    entries_.insert_or_assign(key, std::move(entry));
  }

  // Classifies one top-level pair (see Note [Recognised axolotl keys]).
  void add_top_level(Entry entry) {
    const std::string key = entry.key;  // a copy: `entry` is moved below
    const auto& keys = run_config_keys();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      add(key, std::move(entry));
    } else if (key == kBnbKwargs) {
      add_bnb_kwargs(entry);
    } else if (const RefusedKey* u = find_refused(refused_keys(), key)) {
      if (!is_off(entry.value)) {
        fail(entry.key_place(), key, "axolotl key '" + key + "' is not supported by qtrain; " + u->fix);
      }
    } else if (const IgnoredKey* k = find_ignored(key)) {
      if (is_off(entry.value)) return;
      if (!k->default_value) {
        ignored_.push_back(key + " (" + k->why + ")");
      } else if (!entry.value.IsScalar() || entry.value.Scalar() != k->default_value) {
        ignored_.push_back(key + ": " + (entry.value.IsScalar() ? entry.value.Scalar() : shown(entry.value)) + " (" +
                           k->why + ")");
      }
    } else {
      std::vector<std::string> candidates = keys;
      candidates.push_back(kBnbKwargs);
      fail(entry.key_place(), key, unknown_key_message(key, candidates));
    }
  }

  std::map<std::string, Entry>& entries() { return entries_; }
  // The performance switches seen, as "key (why)"; see Note [Performance hints].
  const std::vector<std::string>& ignored() const { return ignored_; }

 private:
  void add_bnb_kwargs(const Entry& entry) {
    if (entry.value.IsNull()) {
      return;
    }
    if (!entry.value.IsMap()) {
      entry.fail_value("expected a map, got " + shown(entry.value) +
                       "; write e.g. bnb_config_kwargs: {bnb_4bit_quant_type: nf4}");
    }
    for (Entry inner : map_entries(entry.value, entry.origin, std::string(kBnbKwargs) + ".")) {
      const std::string name = inner.key.substr(std::string(kBnbKwargs).size() + 1);
      if (std::find(bnb_kwargs_keys().begin(), bnb_kwargs_keys().end(), name) != bnb_kwargs_keys().end()) {
        add(name, std::move(inner));
      } else if (name == "llm_int8_has_fp16_weight" && is_off(inner.value)) {
        // bitsandbytes' default, and what qtrain does: the float weights are not kept.
      } else {
        fail(inner.key_place(),
             inner.key,
             "qtrain reads only " + join(bnb_kwargs_keys(), ", ") + " from " + kBnbKwargs +
                 "; remove the key (the compute dtype follows bf16/fp16)");
      }
    }
  }

  std::map<std::string, Entry> entries_;
  std::vector<std::string> ignored_;
};

// "key=value" from the command line, its value parsed as YAML.
Entry parse_override(const std::string& argument) {
  const size_t eq = argument.find('=');
  if (eq == std::string::npos || eq == 0) {
    TORCH_CHECK(false,
                "--set ",
                argument,
                ": expected key=value, got '",
                argument,
                "'; write e.g. --set lora_r=16 or --set lora_target_modules=[q_proj,v_proj]");
  }
  const Origin origin = Origin::set_argument(argument);
  Entry entry{argument.substr(0, eq), YAML::Node(), YAML::Node(), origin};
  try {
    entry.value = YAML::Load(argument.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail(origin.whole(),
         entry.key,
         "the value is not valid YAML (" + e.msg + "); quote it, or check the brackets of a list [a, b] or map {k: v}");
  }
  return entry;
}

// The one YAML document of a file, as a map.
YAML::Node load_document(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    TORCH_CHECK(false,
                Origin::file(source).at(e.mark),
                ": invalid YAML: ",
                e.msg,
                "; fix the syntax at that place or just before it (an unclosed bracket or quote starts earlier): "
                "`key: value` lines, lists as [a, b] or `- item` lines, indentation with spaces");
  }
  TORCH_CHECK(!documents.empty() && !documents[0].IsNull(),
              source,
              ": the file is empty; a run config is a YAML map such as `base_model: ./model` "
              "(see docs/CONFIG.md)");
  TORCH_CHECK(documents.size() == 1,
              source,
              ": the file holds ",
              documents.size(),
              " YAML documents (separated by ---); a run config is one");
  const YAML::Node& root = documents[0];
  TORCH_CHECK(root.IsMap(),
              Origin::file(source).at(root.Mark()),
              ": the top level is ",
              root.IsSequence() ? "a list" : "a single value",
              ", not a map; a run config is `key: value` lines such as `base_model: ./model`");
  return root;
}

// --- collecting problems ---------------------------------------------------------------------

// Note [Every problem at once]
// A config with three mistakes should take one edit, not three runs. Each key is read on its own:
// a read that fails throws as before, the throw is caught where that key is read, recorded, and
// reading goes on with the key's default. A check of a combination is skipped when one of its
// keys already failed, so a typo does not also report the contradictions of the default that
// stood in for it. One problem is thrown as it is; several are thrown together, as found: keys
// that are unknown or refused, then values in the order of the keys, then combinations.
class Problems {
 public:
  // Runs `check`; a c10::Error it throws is recorded against keys[0]. Skipped when one of `keys`
  // has already failed.
  template <class F>
  void guard(const std::vector<std::string>& keys, F&& check) {
    for (const std::string& key : keys) {
      if (failed_.contains(key)) return;
    }
    try {
      check();
    } catch (const c10::Error& e) {
      failed_.insert(keys.front());
      messages_.push_back(e.msg());
    }
  }

  void throw_if_any(const std::string& source) const {
    if (messages_.size() == 1) TORCH_CHECK(false, messages_.front());
    TORCH_CHECK(messages_.empty(),
                source,
                ": ",
                messages_.size(),
                " problems in the run config; fix them all before the run:\n  ",
                join(messages_, "\n  "));
  }

 private:
  std::set<std::string> failed_;
  std::vector<std::string> messages_;
};

// --- reading values --------------------------------------------------------------------------

// Reads the collected entries by key, with their types and ranges. Absent and null values give
// the default. Every entry must be read exactly once (an internal check), so a known key that
// nothing reads cannot be dropped silently.
class Reader {
 public:
  Reader(std::map<std::string, Entry>& entries, std::string source, fs::path base_dir, Problems& problems)
      : entries_(entries), source_(std::move(source)), base_dir_(std::move(base_dir)), problems_(problems) {}

  // See Note [Every problem at once]: `check` reads or checks `keys`; a problem is recorded.
  template <class F>
  void guard(const std::vector<std::string>& keys, F&& check) {
    problems_.guard(keys, std::forward<F>(check));
  }

  // The entry of `key` when it is present with a non-null value.
  const Entry* find(const std::string& key) {
    read_.insert(key);
    const auto it = entries_.find(key);
    return it != entries_.end() && !it->second.value.IsNull() ? &it->second : nullptr;
  }
  // Present at all, even null.
  const Entry* find_written(const std::string& key) const {
    const auto it = entries_.find(key);
    return it != entries_.end() ? &it->second : nullptr;
  }
  // Where `key` was written, or the file as a whole for a default.
  std::string place_of(const std::string& key) const {
    const Entry* e = find_written(key);
    return e ? e->key_place() : source_;
  }

  void check_all_read() const {
    for (const auto& [key, entry] : entries_) {
      TORCH_INTERNAL_ASSERT(read_.contains(key), "run config key '", key, "' was collected but never read");
    }
  }

  // The typed reads below give `fallback` for an absent key, and also for a value that fails
  // (the problem is recorded; see Note [Every problem at once]).
  bool boolean(const std::string& key, bool fallback) {
    const Entry* e = find(key);
    return e ? guarded(key, fallback, [&] { return boolean_of(*e); }) : fallback;
  }

  int64_t integer(const std::string& key, int64_t fallback, Range range, const std::string& fix) {
    const Entry* e = find(key);
    return e ? guarded(key, fallback, [&] { return integer_of(*e, range, fix); }) : fallback;
  }

  double number(const std::string& key, double fallback, Range range, const std::string& fix) {
    const Entry* e = find(key);
    return e ? guarded(key, fallback, [&] { return number_of(*e, range, fix); }) : fallback;
  }

  double number_of(const Entry& e, Range range, const std::string& fix) const {
    const std::optional<double> v = e.value.IsScalar() ? parse_double(e.value.Scalar()) : std::nullopt;
    if (!v) {
      e.fail_value("expected a number, got " + shown(e.value) + "; " + fix);
    }
    if (!range.contains(*v)) {
      e.fail_value(range.problem(e.value.Scalar()) + "; " + fix);
    }
    return *v;
  }

  // One of `allowed`; `aliases` maps other accepted spellings to their value in `allowed`.
  std::string choice(const std::string& key,
                     const std::string& fallback,
                     const std::vector<std::string>& allowed,
                     const std::string& fix = "",
                     const std::map<std::string, std::string>& aliases = {}) {
    const Entry* e = find(key);
    return e ? guarded(key, fallback, [&] { return choice_of(*e, allowed, fix, aliases); }) : fallback;
  }

  // A path, resolved against the config's directory; "" or absent gives `fallback` (resolved too).
  fs::path path(const std::string& key, const fs::path& fallback) {
    const Entry* e = find(key);
    return resolve(e ? guarded(key, fallback, [&] { return path_of(*e); }) : fallback);
  }

  std::vector<std::string> strings(const std::string& key, const std::string& example) {
    const Entry* e = find(key);
    return e ? guarded(key, std::vector<std::string>{}, [&] { return strings_of(*e, example); })
             : std::vector<std::string>{};
  }

  std::string text(const std::string& key, const std::string& example) {
    const Entry* e = find(key);
    return e ? guarded(key, std::string{}, [&] { return text_of(*e, example); }) : std::string{};
  }

  std::vector<std::string> module_names(const std::string& key) {
    const Entry* e = find(key);
    return e ? guarded(key, std::vector<std::string>{}, [&] { return module_names_of(*e); })
             : std::vector<std::string>{};
  }

  std::vector<DatasetConfig> datasets(const std::string& key) {
    const Entry* e = find(key);
    if (!e) {
      return {};
    }
    guard({key}, [&] {
      if (!e->value.IsSequence()) {
        e->fail_value("expected a list of datasets, got " + shown(e->value) +
                      "; write e.g. datasets: [{path: data.jsonl, type: completion}]");
      }
    });
    std::vector<DatasetConfig> out;
    for (size_t i = 0; e->value.IsSequence() && i < e->value.size(); ++i) {
      guard({key + "[" + std::to_string(i) + "]"}, [&] { out.push_back(dataset(*e, i)); });
    }
    return out;
  }

  std::vector<std::string> module_names_of(const Entry& e) const {
    if (!e.value.IsSequence()) {
      e.fail_value("expected a list of module names, got " + shown(e.value) +
                   "; write e.g. [q_proj, v_proj] (regular expressions are not supported)");
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      const std::string item_key = e.key + "[" + std::to_string(i) + "]";
      const std::string place = e.origin.at(item.Mark());
      if (!item.IsScalar() || item.Scalar().empty()) {
        fail(place, item_key, "expected a module name, got " + shown(item) + "; write e.g. q_proj");
      }
      const std::string& name = item.Scalar();
      const bool plain = std::all_of(name.begin(), name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
      });
      if (!plain || name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos) {
        fail(place,
             item_key,
             "'" + name +
                 "' is not a module name; use a name such as q_proj or a dotted suffix such as "
                 "self_attn.q_proj (regular expressions are not supported)");
      }
      out.push_back(name);
    }
    return out;
  }

  // A non-empty string, or a list of them (one string reads as a list of one).
  std::vector<std::string> strings_of(const Entry& e, const std::string& example) const {
    std::vector<std::string> out;
    if (e.value.IsScalar()) {
      out.push_back(e.value.Scalar());
    } else if (e.value.IsSequence()) {
      for (const YAML::Node& item : e.value) {
        if (!item.IsScalar() || item.Scalar().empty()) {
          e.fail_value("expected a list of names, got an item " + shown(item) + "; write e.g. " + example);
        }
        out.push_back(item.Scalar());
      }
    } else {
      e.fail_value("expected a list of names, got " + shown(e.value) + "; write e.g. " + example);
    }
    return out;
  }

  // A string; "" (as to_yaml writes an unset one) reads as unset.
  std::string text_of(const Entry& e, const std::string& example) const {
    if (!e.value.IsScalar()) {
      e.fail_value("expected a string, got " + shown(e.value) + "; write e.g. " + example);
    }
    return e.value.Scalar();
  }

  bool boolean_of(const Entry& e) const {
    const std::optional<bool> v = e.value.IsScalar() ? parse_bool(e.value.Scalar()) : std::nullopt;
    if (!v) {
      e.fail_value("expected true or false, got " + shown(e.value));
    }
    return *v;
  }

  int64_t integer_of(const Entry& e, Range range, const std::string& fix) const {
    const std::optional<int64_t> v = e.value.IsScalar() ? parse_int(e.value.Scalar()) : std::nullopt;
    if (!v) {
      e.fail_value("expected an integer, got " + shown(e.value) + "; " + fix);
    }
    if (!range.contains(static_cast<double>(*v))) {
      e.fail_value(range.problem(e.value.Scalar()) + "; " + fix);
    }
    return *v;
  }

  std::string choice_of(const Entry& e,
                        const std::vector<std::string>& allowed,
                        const std::string& fix,
                        const std::map<std::string, std::string>& aliases) const {
    if (!e.value.IsScalar()) {
      e.fail_value("expected one of " + join(allowed, ", ") + ", got " + shown(e.value));
    }
    const std::string& v = e.value.Scalar();
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) {
      return v;
    }
    if (const auto alias = aliases.find(v); alias != aliases.end()) {
      return alias->second;
    }
    std::string message = "'" + v + "' is not one of " + join(allowed, ", ");
    if (!fix.empty()) {
      message += "; " + fix;
    } else if (const auto suggestion = nearest(v, allowed)) {
      message += "; did you mean '" + *suggestion + "'?";
    } else {
      message += "; use one of them";
    }
    e.fail_value(message);
  }

  fs::path path_of(const Entry& e) const {
    if (!e.value.IsScalar()) {
      e.fail_value("expected a path, got " + shown(e.value));
    }
    return fs::path(e.value.Scalar());
  }

  fs::path resolve(const fs::path& p) const {
    if (p.empty() || p.is_absolute()) {
      return p.lexically_normal();
    }
    return (base_dir_ / p).lexically_normal();
  }

 private:
  template <class T, class F>
  T guarded(const std::string& key, T fallback, F&& read) {
    T value = std::move(fallback);
    guard({key}, [&] { value = read(); });
    return value;
  }

  DatasetConfig dataset(const Entry& list, size_t index) const {
    const YAML::Node item = list.value[index];
    const std::string prefix = list.key + "[" + std::to_string(index) + "]";
    if (!item.IsMap()) {
      fail(list.origin.at(item.Mark()),
           prefix,
           "expected a map such as {path: data.jsonl, type: completion}, got " + shown(item));
    }
    std::map<std::string, Entry> fields;
    for (Entry field : map_entries(item, list.origin, prefix + ".")) {
      const std::string name = field.key.substr(prefix.size() + 1);
      if (std::find(dataset_keys().begin(), dataset_keys().end(), name) != dataset_keys().end()) {
        fields.emplace(name, std::move(field));
      } else if (const RefusedKey* u = find_refused(refused_dataset_keys(), name)) {
        if (!is_off(field.value)) {
          fail(field.key_place(), field.key, "axolotl key '" + name + "' is not supported by qtrain; " + u->fix);
        }
      } else {
        fail(field.key_place(), field.key, unknown_key_message(name, dataset_keys()));
      }
    }
    const auto value_of = [&](const std::string& name) -> const Entry* {
      const auto it = fields.find(name);
      return it != fields.end() && !it->second.value.IsNull() ? &it->second : nullptr;
    };

    DatasetConfig d;
    const Entry* path = value_of("path");
    if (!path || path_of(*path).empty()) {
      fail(path ? path->value_place() : list.origin.at(item.Mark()),
           prefix + ".path",
           "missing; every dataset needs the path of a local file, e.g. {path: data.jsonl}");
    }
    d.path = resolve(path_of(*path));
    check_local_file(*path, d.path);
    if (const Entry* ds_type = value_of("ds_type")) {
      const std::string v = text_of(*ds_type, "ds_type: json");
      if (v != "json") {
        ds_type->fail_value("'" + v + "': qtrain reads JSON Lines or a JSON array of rows (ds_type: json); " +
                            conversion_hint(d.path, v));
      }
    }
    if (const Entry* type = value_of("type")) {
      d.type = choice_of(*type,
                         {"completion", "alpaca", "input_output", "chat_template", "pretokenized"},
                         "use completion (a text field), alpaca (instruction/input/output), input_output "
                         "(segments), chat_template (messages) or pretokenized (input_ids), or leave type out for "
                         "rows that carry input_ids",
                         {});
    }
    if (const Entry* field = value_of("field")) {
      if (d.type != "completion") {
        fail(field->key_place(),
             field->key,
             "field applies only to type: completion (this dataset's type is " +
                 (d.type.empty() ? std::string("not set") : d.type) + "); remove it or set type: completion");
      }
      if (!field->value.IsScalar() || field->value.Scalar().empty()) {
        field->fail_value("expected the name of a text field, got " + shown(field->value) + "; write e.g. field: text");
      }
      d.field = field->value.Scalar();
    }
    read_chat_keys(d, value_of);
    return d;
  }

  // Note [Dataset files]
  // axolotl's `path` is a local file or folder or a Hugging Face Hub id, loaded through
  // `datasets` in any of its formats. qtrain reads one local file of JSON Lines or a JSON array of
  // rows (.jsonl/.json), so the two other cases are caught here, where the config's line is
  // known: a Parquet/CSV/Arrow file gets the one-line pandas conversion, and a path written as
  // `org/name` that is no local file gets the `huggingface-cli download` command.
  void check_local_file(const Entry& e, const fs::path& resolved) const {
    const fs::path written = path_of(e);
    auto ext = resolved.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    if (ext == ".parquet" || ext == ".csv" || ext == ".arrow") {
      e.fail_value("qtrain reads JSON Lines (.jsonl) or a JSON array of rows (.json), not " + ext + "; " +
                   conversion_hint(resolved, ext.substr(1)));
    }
    const bool hub_like = written.is_relative() && std::distance(written.begin(), written.end()) == 2 &&
                          written.begin()->string().front() != '.' && ext != ".jsonl" && ext != ".json";
    if (hub_like && !fs::exists(resolved)) {
      e.fail_value("no such local file; qtrain reads local files, not Hugging Face Hub datasets. If '" +
                   written.string() + "' is a Hub dataset, download it with `huggingface-cli download --repo-type " +
                   "dataset " + written.string() + " --local-dir data/" + written.filename().string() +
                   "` and set path: to the .jsonl or .json file in it");
    }
  }

  static std::string conversion_hint(const fs::path& path, const std::string& format) {
    const fs::path out = fs::path(path).replace_extension(".jsonl");
    if (format != "parquet" && format != "csv") {
      return "convert it to JSON Lines (one JSON object per line) and set path: to that file";
    }
    return "convert it with `python -c \"import pandas as pd; pd.read_" + format + "('" + path.string() +
           "').to_json('" + out.string() +
           "', orient='records', lines=True, force_ascii=False)\"` and set path: " + out.string();
  }

  // The type chat_template keys of a dataset entry; see DatasetConfig.
  template <class ValueOf>
  void read_chat_keys(DatasetConfig& d, const ValueOf& value_of) const {
    for (const char* name : {"field_messages",
                             "message_property_mappings",
                             "message_field_role",
                             "message_field_content",
                             "message_field_training",
                             "message_field_training_detail",
                             "field_thinking",
                             "field_tools",
                             "roles",
                             "roles_to_train",
                             "train_on_eos",
                             "train_on_eot",
                             "drop_system_message"}) {
      const Entry* e = value_of(name);
      if (e && d.type != "chat_template") {
        fail(e->key_place(),
             e->key,
             std::string(name) + " applies only to type: chat_template (this dataset's type is " +
                 (d.type.empty() ? std::string("not set") : d.type) + "); remove it or set type: chat_template");
      }
    }
    if (const Entry* e = value_of("field_messages")) d.field_messages = text_of(*e, "field_messages: conversations");
    if (const Entry* e = value_of("message_property_mappings")) {
      const std::string example = "message_property_mappings: {role: from, content: value}";
      if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
      for (const auto& item : e->value) {
        const std::string name = item.first.Scalar();
        if (!item.second.IsScalar() || item.second.Scalar().empty()) {
          e->fail_value("'" + name + "' is not mapped to a message key; write e.g. " + example);
        }
        if (name == "role" || name == "content") {
          (name == "role" ? d.message_role : d.message_content) = item.second.Scalar();
        } else {
          d.message_properties[name] = item.second.Scalar();
        }
      }
    }
    // axolotl's deprecated spellings of message_property_mappings' role and content.
    for (const char* legacy : {"message_field_role", "message_field_content"}) {
      const Entry* e = value_of(legacy);
      if (!e) continue;
      const bool role = std::string(legacy) == "message_field_role";
      std::string& target = role ? d.message_role : d.message_content;
      const std::string v = text_of(*e, std::string(legacy) + ": " + (role ? "from" : "value"));
      const std::string mapped = role ? "role" : "content";
      if (value_of("message_property_mappings") && value_of("message_property_mappings")->value[mapped] &&
          target != v) {
        e->fail_value("'" + v + "' conflicts with message_property_mappings." + mapped + " '" + target +
                      "'; keep only message_property_mappings");
      }
      target = v;
    }
    if (const Entry* e = value_of("field_thinking")) {
      const std::string v = text_of(*e, "field_thinking: thinking");
      if (value_of("message_property_mappings") || value_of("message_field_role") ||
          value_of("message_field_content")) {
        e->fail_value(
            "axolotl applies field_thinking only without message_property_mappings; map it there "
            "instead: message_property_mappings: {reasoning_content: " +
            v + "}");
      }
      if (v != "reasoning_content") d.message_properties["reasoning_content"] = v;
    }
    if (const Entry* e = value_of("field_tools")) d.field_tools = text_of(*e, "field_tools: tools");
    if (const Entry* e = value_of("message_field_training")) {
      d.message_field_training = text_of(*e, "message_field_training: training");
    }
    if (const Entry* e = value_of("message_field_training_detail")) {
      d.message_field_training_detail = text_of(*e, "message_field_training_detail: train_detail");
    }
    if (const Entry* e = value_of("drop_system_message")) d.drop_system_message = boolean_of(*e);
    if (const Entry* e = value_of("roles")) {
      const std::string example = "roles: {user: [human, user], assistant: [gpt, bot]}";
      if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
      for (const auto& item : e->value) {
        // A new Entry, not a copy of *e with its value assigned: YAML::Node assignment writes
        // through to the node it refers to.
        const Entry sources{e->key, e->key_node, item.second, e->origin};
        for (const std::string& source : strings_of(sources, example)) d.roles[source] = item.first.Scalar();
      }
    }
    if (const Entry* e = value_of("roles_to_train")) d.roles_to_train = strings_of(*e, "roles_to_train: [assistant]");
    if (const Entry* e = value_of("train_on_eos")) {
      d.train_on_eos = choice_of(*e,
                                 {"turn", "all", "last", "none"},
                                 "use turn (the end of each trained turn), all, last or none",
                                 {{"false", "none"}});
    }
    if (const Entry* e = value_of("train_on_eot")) {
      d.train_on_eot = choice_of(*e,
                                 {"turn", "all", "last", "none"},
                                 "use turn (the end of each trained turn), all, last or none",
                                 {{"false", "none"}});
    }
  }

  std::map<std::string, Entry>& entries_;
  std::set<std::string> read_;
  std::string source_;
  fs::path base_dir_;
  Problems& problems_;
};

// --- the keys --------------------------------------------------------------------------------

// One token of special_tokens; "" (as to_yaml writes an unset one) leaves the tokenizer's.
std::string text_of_token(const Entry& e, const std::string& example) {
  if (!e.value.IsScalar()) {
    e.fail_value("expected a token, got " + shown(e.value) + "; write e.g. " + example);
  }
  return e.value.Scalar();
}

RunConfig read_config(Reader& r) {
  RunConfig c;
  c.base_model = r.path("base_model", "");
  r.guard({"base_model"}, [&] {
    TORCH_CHECK(!c.base_model.empty(),
                r.place_of("base_model"),
                ": base_model: missing; set it to a local Hugging Face model folder, e.g. base_model: ./models/llama");
  });

  c.load_in_4bit = r.boolean("load_in_4bit", c.load_in_4bit);
  c.load_in_8bit = r.boolean("load_in_8bit", c.load_in_8bit);
  c.bnb_4bit_quant_type = r.choice("bnb_4bit_quant_type", c.bnb_4bit_quant_type, {"nf4", "fp4"});
  c.bnb_4bit_use_double_quant = r.boolean("bnb_4bit_use_double_quant", c.bnb_4bit_use_double_quant);
  c.bnb_4bit_blocksize = r.integer("bnb_4bit_blocksize",
                                   c.bnb_4bit_blocksize,
                                   Range{.lo = 32, .hi = 4096},
                                   "use a power of 2 from 32 to 4096 (64 is bitsandbytes' default)");
  r.guard({"bnb_4bit_blocksize"}, [&] {
    if (const int64_t b = c.bnb_4bit_blocksize; (b & (b - 1)) != 0) {
      c.bnb_4bit_blocksize = 64;
      r.find("bnb_4bit_blocksize")
          ->fail_value(std::to_string(b) +
                       " is not a power of 2; use 32, 64, 128, ..., 4096 (64 is bitsandbytes' default)");
    }
  });
  c.llm_int8_threshold =
      r.number("llm_int8_threshold",
               c.llm_int8_threshold,
               at_least(0),
               "use a magnitude such as 6.0 (bitsandbytes' default); 0 computes every column in int8");
  c.int8_compute = r.choice("int8_compute", c.int8_compute, {"dequantize", "llm_int8"});

  // axolotl's `adapter:` left blank means a full fine-tune, which qtrain does not do; that must
  // not turn into LoRA silently.
  r.guard({"adapter"}, [&] {
    if (const Entry* e = r.find_written("adapter"); e && e->value.IsNull()) {
      fail(e->key_place(),
           "adapter",
           "blank (axolotl's full fine-tune); qtrain trains LoRA adapters only, set adapter: lora or adapter: qlora");
    }
  });
  c.adapter = r.choice("adapter", c.load_in_4bit ? "qlora" : "lora", {"lora", "qlora"});
  c.lora_r = r.integer("lora_r", c.lora_r, at_least(1), "use a rank of 1 or more, typically 8 to 64");
  c.lora_alpha = r.number("lora_alpha", c.lora_alpha, above(0), "use a positive number, commonly lora_r or 2 * lora_r");
  c.lora_dropout = r.number(
      "lora_dropout", c.lora_dropout, unit_interval_open(), "use a value from 0 (off) to below 1, typically 0.05");
  c.lora_target_modules = r.module_names("lora_target_modules");
  c.lora_target_linear = r.boolean("lora_target_linear", c.lora_target_linear);
  c.peft_use_rslora = r.boolean("peft_use_rslora", c.peft_use_rslora);
  c.lora_model_dir = r.path("lora_model_dir", c.lora_model_dir);

  c.datasets = r.datasets("datasets");
  c.sequence_len = r.integer("sequence_len", c.sequence_len, at_least(1), "use the tokens per sample, e.g. 2048");
  c.sample_packing = r.boolean("sample_packing", c.sample_packing);
  c.train_on_inputs = r.boolean("train_on_inputs", c.train_on_inputs);
  c.chat_template_jinja = r.text("chat_template_jinja", "chat_template_jinja: ./chatml.jinja");
  std::vector<std::string> template_choices = {"tokenizer_default", "jinja"};
  const std::vector<std::string> template_names = text::named_chat_template_names();
  template_choices.insert(template_choices.end(), template_names.begin(), template_names.end());
  for (const std::string& n : template_names) {
    template_choices.push_back(std::string(text::kTokenizerDefaultFallbackPrefix) + n);
  }
  c.chat_template =
      r.choice("chat_template",
               c.chat_template_jinja.empty() ? c.chat_template : "jinja",
               template_choices,
               "use tokenizer_default (the template in tokenizer_config.json), one of axolotl's template "
               "names (chatml, llama3, ...), tokenizer_default_fallback_<name> (the tokenizer's template, "
               "else that one) or jinja with chat_template_jinja (your own template: the Jinja text or a "
               ".jinja file)",
               {});
  c.eot_tokens = r.strings("eot_tokens", "eot_tokens: [\"<|im_end|>\"]");
  r.guard({"chat_template"}, [&] {
    TORCH_CHECK(c.chat_template != "jinja" || !c.chat_template_jinja.empty(),
                r.place_of("chat_template"),
                ": chat_template: jinja needs chat_template_jinja (the Jinja text, or the path of a .jinja file)");
    if (c.chat_template.starts_with(text::kTokenizerDefaultFallbackPrefix)) {
      const std::string fallback =
          text::named_chat_template(c.chat_template.substr(text::kTokenizerDefaultFallbackPrefix.size()));
      for (DatasetConfig& d : c.datasets) d.chat_template_fallback = fallback;
      return;
    }
    if (const auto named = text::find_named_chat_template(c.chat_template)) {
      for (DatasetConfig& d : c.datasets) d.chat_template_source = *named;
      return;
    }
    if (c.chat_template != "jinja") return;
    // Inline Jinja has a tag; anything else is the path of a file, resolved like other paths.
    const bool inline_text =
        c.chat_template_jinja.find("{{") != std::string::npos || c.chat_template_jinja.find("{%") != std::string::npos;
    std::string source = c.chat_template_jinja;
    if (!inline_text) {
      const fs::path file = r.resolve(c.chat_template_jinja);
      std::ifstream in(file, std::ios::binary);
      TORCH_CHECK(in.good(),
                  r.place_of("chat_template_jinja"),
                  ": chat_template_jinja: cannot read '",
                  file.string(),
                  "'; give the path of a .jinja file or the template text itself");
      source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    for (DatasetConfig& d : c.datasets) d.chat_template_source = source;
  });
  for (DatasetConfig& d : c.datasets) d.eot_tokens = c.eot_tokens;
  r.guard({"special_tokens"}, [&] {
    const Entry* e = r.find("special_tokens");
    if (!e) return;
    const std::string example = "special_tokens: {pad_token: \"<|end_of_text|>\"}";
    if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
    c.special_tokens.place = e->key_place();
    for (const Entry& role : map_entries(e->value, e->origin, "special_tokens.")) {
      const std::string name = role.key.substr(std::string("special_tokens.").size());
      std::string* slot = name == "bos_token"   ? &c.special_tokens.bos_token
                          : name == "eos_token" ? &c.special_tokens.eos_token
                          : name == "pad_token" ? &c.special_tokens.pad_token
                          : name == "unk_token" ? &c.special_tokens.unk_token
                                                : nullptr;
      if (!slot) {
        fail(role.key_place(),
             role.key,
             name == "additional_special_tokens"
                 ? "marking more tokens special changes how text containing them is split, which qtrain does not do; "
                   "remove the key"
                 : "qtrain reads bos_token, eos_token, pad_token and unk_token here; remove the key");
      }
      if (role.value.IsNull()) continue;
      *slot = text_of_token(role, example);
    }
  });
  c.excess_length_strategy = r.choice("excess_length_strategy",
                                      c.excess_length_strategy,
                                      {"drop", "truncate", "raise"},
                                      "use drop (axolotl's default), truncate or raise",
                                      {});
  for (DatasetConfig& d : c.datasets) d.excess_length_strategy = c.excess_length_strategy;
  c.dataset_prepared_path = r.path("dataset_prepared_path", c.dataset_prepared_path);
  c.dataset_processes = r.integer(
      "dataset_processes", c.dataset_processes, at_least(0), "use the threads that tokenize rows, or 0 for every core");
  r.guard({"val_set_size"}, [&] {
    if (const Entry* e = r.find("val_set_size")) {
      const std::string fix = "use a fraction such as 0.05, a whole number of rows such as 500, or 0 for none";
      const double v = r.number_of(*e, at_least(0), fix);
      if (v >= 1 && std::floor(v) != v) {
        e->fail_value(e->value.Scalar() + " is neither a fraction in [0, 1) nor a whole number of rows >= 1; " + fix);
      }
      c.val_set_size = v;
    }
  });

  c.micro_batch_size =
      r.integer("micro_batch_size", c.micro_batch_size, at_least(1), "use the samples per forward pass, 1 or more");
  c.gradient_accumulation_steps = r.integer("gradient_accumulation_steps",
                                            c.gradient_accumulation_steps,
                                            at_least(1),
                                            "use the micro-batches per optimizer step, 1 or more");
  c.num_epochs = r.integer("num_epochs", c.num_epochs, at_least(1), "use 1 or more passes over the data");
  c.max_steps = r.integer("max_steps", c.max_steps, at_least(-1), "use -1 (run num_epochs) or a step count >= 1");
  r.guard({"max_steps"}, [&] {
    if (c.max_steps == 0) {
      c.max_steps = -1;
      r.find("max_steps")->fail_value("0 is neither -1 (run num_epochs) nor a step count; use -1 or a count >= 1");
    }
  });
  c.learning_rate = r.number("learning_rate", c.learning_rate, above(0), "use a positive rate, e.g. 2e-4 for LoRA");
  c.lr_scheduler = r.choice("lr_scheduler", c.lr_scheduler, {"constant", "linear", "cosine"});
  c.warmup_steps = r.integer("warmup_steps", c.warmup_steps, at_least(0), "use 0 (no warmup) or a step count");
  c.warmup_ratio = r.number(
      "warmup_ratio", c.warmup_ratio, unit_interval_open(), "use a fraction of the run such as 0.03, or 0 for none");
  c.optimizer = r.choice("optimizer",
                         c.optimizer,
                         {"adamw_torch"},
                         "qtrain implements AdamW: use adamw_torch (also read from adamw, adamw_torch_fused, "
                         "paged_adamw_32bit, adamw_8bit, adamw_bnb_8bit, paged_adamw_8bit and adamw_torch_4bit)",
                         {{"adamw", "adamw_torch"},
                          {"adamw_torch_fused", "adamw_torch"},
                          {"paged_adamw_32bit", "adamw_torch"},
                          {"adamw_8bit", "adamw_torch"},
                          {"adamw_bnb_8bit", "adamw_torch"},
                          {"paged_adamw_8bit", "adamw_torch"},
                          {"adamw_torch_4bit", "adamw_torch"}});
  // The same AdamW, with another way to hold its state in memory: see Note [Performance hints].
  if (const Entry* e = r.find("optimizer"); e && e->value.IsScalar()) {
    const std::string& name = e->value.Scalar();
    if (name == "adamw_torch_fused") {
      c.ignored_keys.push_back("optimizer: adamw_torch_fused (the same AdamW; fusing is a kernel choice)");
    } else if (name == "paged_adamw_32bit") {
      c.ignored_keys.push_back(
          "optimizer: paged_adamw_32bit (the same AdamW; paging moves its state to host memory under pressure, "
          "and LoRA's state is small)");
    } else if (name == "adamw_8bit" || name == "adamw_bnb_8bit" || name == "paged_adamw_8bit" ||
               name == "adamw_torch_4bit") {
      c.ignored_keys.push_back("optimizer: " + name + " (AdamW with its state rounded to " +
                               (name.ends_with("4bit") ? "4" : "8") +
                               " bits to save memory; qtrain keeps LoRA's small state in 32 bits, so the updates "
                               "lack that rounding)");
    }
  }
  c.adam_beta1 = r.number("adam_beta1", c.adam_beta1, unit_interval_open(), "use a value in [0, 1), e.g. 0.9");
  c.adam_beta2 = r.number("adam_beta2", c.adam_beta2, unit_interval_open(), "use a value in [0, 1), e.g. 0.999");
  c.adam_epsilon = r.number("adam_epsilon", c.adam_epsilon, above(0), "use a small positive number, e.g. 1e-8");
  c.weight_decay = r.number("weight_decay", c.weight_decay, at_least(0), "use 0 (none) or a positive decay, e.g. 0.01");
  c.max_grad_norm =
      r.number("max_grad_norm", c.max_grad_norm, at_least(0), "use 0 (no clipping) or a positive norm, e.g. 1.0");

  r.guard({"gradient_checkpointing"}, [&] {
    if (const Entry* e = r.find("gradient_checkpointing")) {
      const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
      if (on) {
        c.gradient_checkpointing = *on ? GradientCheckpointing::every_layer : GradientCheckpointing::off;
      } else if (e->value.IsScalar() && e->value.Scalar() == "every_kth") {
        c.gradient_checkpointing = GradientCheckpointing::every_kth;
      } else if (e->value.IsScalar() && e->value.Scalar() == "offload") {
        // axolotl's checkpointing with the saved layer inputs in host memory: the same recompute.
        c.gradient_checkpointing = GradientCheckpointing::every_layer;
        c.ignored_keys.push_back(
            "gradient_checkpointing: offload (read as true: the same recompute, with the checkpoints kept on the "
            "device)");
      } else {
        e->fail_value("expected true, false, offload or every_kth, got " + shown(e->value));
      }
    }
  });

  c.gradient_checkpointing_every_k = r.integer(
      "gradient_checkpointing_every_k", c.gradient_checkpointing_every_k, at_least(1), "use 1 (every layer) or more");
  r.guard({"gradient_checkpointing_every_k", "gradient_checkpointing"}, [&] {
    if (const Entry* e = r.find_written("gradient_checkpointing_every_k");
        e && c.gradient_checkpointing_every_k != 1 && c.gradient_checkpointing != GradientCheckpointing::every_kth) {
      fail(e->key_place(),
           e->key,
           std::to_string(c.gradient_checkpointing_every_k) +
               " has no effect unless gradient_checkpointing: every_kth; set that, or remove this key");
    }
  });
  r.guard({"bf16"}, [&] {
    if (const Entry* e = r.find("bf16")) {
      const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
      if (on) {
        c.bf16 = *on ? Bf16::on : Bf16::off;
      } else if (e->value.IsScalar() && e->value.Scalar() == "auto") {
        c.bf16 = Bf16::automatic;
      } else {
        e->fail_value("expected true, false or auto, got " + shown(e->value));
      }
    }
  });

  c.fp16 = r.boolean("fp16", c.fp16);
  r.guard({"device"}, [&] {
    if (const Entry* e = r.find("device")) {
      const std::string v = e->value.IsScalar() ? e->value.Scalar() : "";
      const bool indexed = v.starts_with("cuda:") && v.size() > 5 && parse_int(v.substr(5)).value_or(-1) >= 0 &&
                           std::isdigit(static_cast<unsigned char>(v[5]));
      if (v != "auto" && v != "cpu" && v != "cuda" && !indexed) {
        e->fail_value("expected auto, cpu, cuda or cuda:N, got " + shown(e->value) + "; e.g. device: cuda:0");
      }
      c.device = v;
    }
  });

  r.guard({"offload_layers"}, [&] {
    if (const Entry* e = r.find("offload_layers")) {
      if (e->value.IsScalar() && e->value.Scalar() == "auto") {
        c.offload_layers_auto = true;
      } else {
        c.offload_layers = r.integer_of(
            *e, at_least(0), "use auto (as few layers as fit gpu_memory_limit) or a number of layers, 0 for none");
      }
    }
  });

  c.offload_prefetch_depth = r.integer("offload_prefetch_depth",
                                       c.offload_prefetch_depth,
                                       at_least(1),
                                       "use 1 (copy the next offloaded layer while one computes) or more");
  r.guard({"offload_prefetch_depth", "offload_layers"}, [&] {
    if (const Entry* e = r.find_written("offload_prefetch_depth");
        e && c.offload_prefetch_depth != 1 && !c.offload_layers_auto && c.offload_layers == 0) {
      fail(e->key_place(),
           e->key,
           std::to_string(c.offload_prefetch_depth) +
               " has no effect without offloaded layers; set offload_layers (auto or a number), or remove this key");
    }
  });
  r.guard({"gpu_memory_limit"}, [&] {
    if (const Entry* e = r.find("gpu_memory_limit")) {
      const std::optional<int64_t> v = e->value.IsScalar() ? parse_byte_size(e->value.Scalar()) : std::nullopt;
      if (!v) {
        e->fail_value("expected a size such as 20GiB, 24GB or 20 (GiB), got " + shown(e->value) +
                      "; 0 or blank: the whole device");
      }
      c.gpu_memory_limit = *v;
    }
  });

  c.output_dir = r.path("output_dir", c.output_dir);
  r.guard({"output_dir"}, [&] {
    if (c.output_dir.empty()) {
      c.output_dir = "./outputs";
      r.find_written("output_dir")->fail_value("empty; set a folder for checkpoints and the adapter, e.g. ./outputs");
    }
  });
  c.save_steps = r.integer("save_steps", c.save_steps, at_least(0), "use 0 (save at the end only) or a step interval");
  c.saves_per_epoch = r.integer("saves_per_epoch", c.saves_per_epoch, at_least(0), "use 0 (unset) or a count of saves");
  c.save_total_limit =
      r.integer("save_total_limit", c.save_total_limit, at_least(0), "use 0 (keep all) or the checkpoints to keep");
  c.logging_steps = r.integer("logging_steps", c.logging_steps, at_least(1), "use a step interval of 1 or more");
  c.loss_watchdog_threshold = r.number("loss_watchdog_threshold",
                                       c.loss_watchdog_threshold,
                                       at_least(0),
                                       "use 0 (off) or the loss above which the run stops, e.g. 5.0");
  c.loss_watchdog_patience = r.integer("loss_watchdog_patience",
                                       c.loss_watchdog_patience,
                                       at_least(1),
                                       "use the logged steps in a row above the threshold that stop the run, e.g. 3");
  c.eval_steps = r.integer("eval_steps", c.eval_steps, at_least(0), "use 0 (never) or a step interval");
  c.evals_per_epoch =
      r.integer("evals_per_epoch", c.evals_per_epoch, at_least(0), "use 0 (unset) or a count of evaluations");
  c.seed = r.integer("seed", c.seed, at_least(0), "use a non-negative integer");
  r.guard({"resume_from_checkpoint"}, [&] {
    if (const Entry* e = r.find("resume_from_checkpoint")) {
      const std::optional<bool> latest = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
      if (latest) {
        c.resume_from_latest_checkpoint = *latest;
      } else {
        c.resume_from_checkpoint = r.resolve(r.path_of(*e));
      }
    }
  });

  c.use_tensorboard = r.boolean("use_tensorboard", c.use_tensorboard);
  r.check_all_read();

  // --- combinations ---
  r.guard({"load_in_8bit", "load_in_4bit"}, [&] {
    if (c.load_in_4bit && c.load_in_8bit) {
      fail(r.place_of("load_in_8bit"),
           "load_in_8bit",
           "load_in_4bit (" + r.place_of("load_in_4bit") +
               ") and load_in_8bit are both true; choose one quantization of the base (4-bit for QLoRA)");
    }
  });

  r.guard({"adapter", "load_in_4bit"}, [&] {
    if (c.adapter == "qlora" && !c.load_in_4bit) {
      fail(r.place_of("adapter"),
           "adapter",
           "qlora needs load_in_4bit: true (it is false); set load_in_4bit: true, or use adapter: lora");
    }
  });

  r.guard({"adapter", "load_in_4bit"}, [&] {
    if (c.adapter == "lora" && c.load_in_4bit) {
      fail(r.place_of("adapter"),
           "adapter",
           "lora with load_in_4bit: true is QLoRA; write adapter: qlora, or remove load_in_4bit");
    }
  });

  r.guard({"lora_target_modules", "lora_target_linear"}, [&] {
    if (c.lora_target_modules.empty() && !c.lora_target_linear) {
      const std::string key = r.find_written("lora_target_modules")  ? "lora_target_modules"
                              : r.find_written("lora_target_linear") ? "lora_target_linear"
                                                                     : "lora_target_modules";
      fail(r.place_of(key),
           key,
           "no LoRA target modules; list them (lora_target_modules: [q_proj, k_proj, v_proj, o_proj]) "
           "or target every linear layer (lora_target_linear: true)");
    }
  });

  r.guard({"warmup_ratio", "warmup_steps"}, [&] {
    if (c.warmup_steps > 0 && c.warmup_ratio > 0) {
      fail(r.place_of("warmup_ratio"),
           "warmup_ratio",
           "warmup_steps (" + std::to_string(c.warmup_steps) + ", at " + r.place_of("warmup_steps") +
               ") and warmup_ratio are both set; keep one");
    }
  });

  r.guard({"fp16", "bf16"}, [&] {
    if (c.fp16 && c.bf16 != Bf16::off) {
      fail(r.place_of("fp16"),
           "fp16",
           "fp16 and bf16 (" + r.place_of("bf16") + ") are both on; choose one (bf16: false to train in fp16)");
    }
  });

  // axolotl refuses these pairs too (src/axolotl/utils/schemas/validation.py).
  r.guard({"saves_per_epoch", "save_steps"}, [&] {
    if (c.saves_per_epoch > 0 && c.save_steps > 0) {
      fail(r.place_of("saves_per_epoch"),
           "saves_per_epoch",
           "save_steps (" + r.place_of("save_steps") + ") is set too; they are two ways to say one thing, keep one");
    }
  });
  r.guard({"evals_per_epoch", "eval_steps"}, [&] {
    if (c.evals_per_epoch > 0 && c.eval_steps > 0) {
      fail(r.place_of("evals_per_epoch"),
           "evals_per_epoch",
           "eval_steps (" + r.place_of("eval_steps") + ") is set too; they are two ways to say one thing, keep one");
    }
  });

  r.guard({"eval_steps", "val_set_size"}, [&] {
    if (c.eval_steps > 0 && c.val_set_size == 0) {
      fail(r.place_of("eval_steps"),
           "eval_steps",
           "evaluating every " + std::to_string(c.eval_steps) +
               " steps needs held-out rows, but val_set_size is 0; set val_set_size (e.g. 0.05) or eval_steps: 0");
    }
  });

  return c;
}

// --- writing ---------------------------------------------------------------------------------

// A YAML double-quoted string: the one form that never reads back as a number, bool or null.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string boolean_text(bool v) {
  return v ? "true" : "false";
}

}  // namespace

RunConfig parse_run_config(const std::string& yaml_text,
                           const std::string& source_name,
                           const std::filesystem::path& base_dir,
                           const std::vector<std::string>& overrides) {
  const YAML::Node root = load_document(yaml_text, source_name);
  Problems problems;
  EntrySet entries;
  for (Entry& e : map_entries(root, Origin::file(source_name), "")) {
    problems.guard({e.key}, [&] { entries.add_top_level(std::move(e)); });
  }
  for (const std::string& argument : overrides) {
    problems.guard({argument}, [&] { entries.add_top_level(parse_override(argument)); });
  }
  Reader reader(entries.entries(), source_name, base_dir, problems);
  RunConfig c = read_config(reader);
  problems.throw_if_any(source_name);
  c.ignored_keys.insert(c.ignored_keys.begin(), entries.ignored().begin(), entries.ignored().end());
  return c;
}

RunConfig load_run_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  std::ifstream in(file, std::ios::binary);
  TORCH_CHECK(in.good(),
              file.string(),
              ": cannot read the run config (",
              std::error_code(errno, std::generic_category()).message(),
              "); check the path");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_run_config(text.str(), file.string(), fs::absolute(file).parent_path(), overrides);
}

std::string ignored_keys_note(const RunConfig& c) {
  if (c.ignored_keys.empty()) return "";
  return "accepted and ignored (they do not change what is trained): " + join(c.ignored_keys, ", ");
}

std::string to_yaml(const RunConfig& c) {
  std::ostringstream out;
  const auto line = [&](const char* key, const std::string& value) { out << key << ": " << value << "\n"; };
  out << "# qtrain run config with every key resolved (docs/CONFIG.md)\n";
  line("base_model", quoted(c.base_model.string()));
  line("load_in_4bit", boolean_text(c.load_in_4bit));
  line("load_in_8bit", boolean_text(c.load_in_8bit));
  line("bnb_4bit_quant_type", c.bnb_4bit_quant_type);
  line("bnb_4bit_use_double_quant", boolean_text(c.bnb_4bit_use_double_quant));
  line("bnb_4bit_blocksize", std::to_string(c.bnb_4bit_blocksize));
  line("llm_int8_threshold", format_double(c.llm_int8_threshold));
  line("int8_compute", c.int8_compute);
  line("adapter", c.adapter);
  line("lora_r", std::to_string(c.lora_r));
  line("lora_alpha", format_double(c.lora_alpha));
  line("lora_dropout", format_double(c.lora_dropout));
  std::vector<std::string> modules;
  for (const std::string& m : c.lora_target_modules) {
    modules.push_back(quoted(m));
  }
  line("lora_target_modules", "[" + join(modules, ", ") + "]");
  line("lora_target_linear", boolean_text(c.lora_target_linear));
  line("peft_use_rslora", boolean_text(c.peft_use_rslora));
  line("lora_model_dir", quoted(c.lora_model_dir.string()));
  if (c.datasets.empty()) {
    line("datasets", "[]");
  } else {
    out << "datasets:\n";
    for (const DatasetConfig& d : c.datasets) {
      out << "  - path: " << quoted(d.path.string()) << "\n";
      if (!d.type.empty()) {
        out << "    type: " << d.type << "\n";
      }
      if (d.type == "completion") {
        out << "    field: " << quoted(d.field) << "\n";
      }
      if (d.type == "chat_template") {
        std::vector<std::string> trained;
        for (const std::string& role : d.roles_to_train) trained.push_back(quoted(role));
        out << "    field_messages: " << quoted(d.field_messages) << "\n";
        out << "    message_property_mappings: {role: " << quoted(d.message_role)
            << ", content: " << quoted(d.message_content);
        for (const auto& [key, source] : d.message_properties) out << ", " << key << ": " << quoted(source);
        out << "}\n";
        if (!d.roles.empty()) {
          out << "    roles:\n";
          for (const auto& [source, role] : d.roles)
            out << "      " << quoted(role) << ": [" << quoted(source) << "]\n";
        }
        out << "    roles_to_train: [" << join(trained, ", ") << "]\n";
        out << "    train_on_eos: " << d.train_on_eos << "\n";
        if (!d.train_on_eot.empty()) out << "    train_on_eot: " << d.train_on_eot << "\n";
        if (!d.message_field_training.empty()) {
          out << "    message_field_training: " << quoted(d.message_field_training) << "\n";
        }
        if (!d.message_field_training_detail.empty()) {
          out << "    message_field_training_detail: " << quoted(d.message_field_training_detail) << "\n";
        }
        out << "    field_tools: " << quoted(d.field_tools) << "\n";
        out << "    drop_system_message: " << boolean_text(d.drop_system_message) << "\n";
      }
    }
  }
  line("sequence_len", std::to_string(c.sequence_len));
  line("sample_packing", boolean_text(c.sample_packing));
  line("train_on_inputs", boolean_text(c.train_on_inputs));
  line("chat_template", c.chat_template);
  line("chat_template_jinja", quoted(c.chat_template_jinja));
  std::vector<std::string> eot;
  for (const std::string& token : c.eot_tokens) eot.push_back(quoted(token));
  line("eot_tokens", "[" + join(eot, ", ") + "]");
  out << "special_tokens: {bos_token: " << quoted(c.special_tokens.bos_token)
      << ", eos_token: " << quoted(c.special_tokens.eos_token) << ", pad_token: " << quoted(c.special_tokens.pad_token)
      << ", unk_token: " << quoted(c.special_tokens.unk_token) << "}\n";
  line("excess_length_strategy", c.excess_length_strategy);
  line("dataset_prepared_path", quoted(c.dataset_prepared_path.string()));
  line("dataset_processes", std::to_string(c.dataset_processes));
  // A whole count is written as an integer, the way users write it.
  line("val_set_size",
       c.val_set_size >= 1 ? std::to_string(static_cast<int64_t>(c.val_set_size)) : format_double(c.val_set_size));
  line("micro_batch_size", std::to_string(c.micro_batch_size));
  line("gradient_accumulation_steps", std::to_string(c.gradient_accumulation_steps));
  line("num_epochs", std::to_string(c.num_epochs));
  line("max_steps", std::to_string(c.max_steps));
  line("learning_rate", format_double(c.learning_rate));
  line("lr_scheduler", c.lr_scheduler);
  line("warmup_steps", std::to_string(c.warmup_steps));
  line("warmup_ratio", format_double(c.warmup_ratio));
  line("optimizer", c.optimizer);
  line("adam_beta1", format_double(c.adam_beta1));
  line("adam_beta2", format_double(c.adam_beta2));
  line("adam_epsilon", format_double(c.adam_epsilon));
  line("weight_decay", format_double(c.weight_decay));
  line("max_grad_norm", format_double(c.max_grad_norm));
  switch (c.gradient_checkpointing) {
    case GradientCheckpointing::off:
      line("gradient_checkpointing", "false");
      break;
    case GradientCheckpointing::every_layer:
      line("gradient_checkpointing", "true");
      break;
    case GradientCheckpointing::every_kth:
      line("gradient_checkpointing", "every_kth");
      break;
  }
  line("gradient_checkpointing_every_k", std::to_string(c.gradient_checkpointing_every_k));
  switch (c.bf16) {
    case Bf16::off:
      line("bf16", "false");
      break;
    case Bf16::on:
      line("bf16", "true");
      break;
    case Bf16::automatic:
      line("bf16", "auto");
      break;
  }
  line("fp16", boolean_text(c.fp16));
  line("device", c.device);
  line("offload_layers", c.offload_layers_auto ? "auto" : std::to_string(c.offload_layers));
  line("offload_prefetch_depth", std::to_string(c.offload_prefetch_depth));
  line("gpu_memory_limit", format_byte_size(c.gpu_memory_limit));
  line("output_dir", quoted(c.output_dir.string()));
  line("save_steps", std::to_string(c.save_steps));
  line("saves_per_epoch", std::to_string(c.saves_per_epoch));
  line("save_total_limit", std::to_string(c.save_total_limit));
  line("logging_steps", std::to_string(c.logging_steps));
  line("loss_watchdog_threshold", format_double(c.loss_watchdog_threshold));
  line("loss_watchdog_patience", std::to_string(c.loss_watchdog_patience));
  line("eval_steps", std::to_string(c.eval_steps));
  line("evals_per_epoch", std::to_string(c.evals_per_epoch));
  line("seed", std::to_string(c.seed));
  line("resume_from_checkpoint",
       c.resume_from_latest_checkpoint    ? "true"
       : c.resume_from_checkpoint.empty() ? "false"
                                          : quoted(c.resume_from_checkpoint.string()));
  line("use_tensorboard", boolean_text(c.use_tensorboard));
  return out.str();
}

}  // namespace qtrain::engine::config
