// See config_reader.h: the typed reads.
#include "engine/config/config_reader.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "engine/config/key_suggestion.h"
#include "engine/lora/lora_config.h"

namespace qtrain::engine::config {

namespace fs = std::filesystem;

const Entry* Reader::find(const std::string& key) {
  read_.insert(key);
  const auto it = entries_.find(key);
  return it != entries_.end() && !it->second.value.IsNull() ? &it->second : nullptr;
}

const Entry* Reader::find_written(const std::string& key) const {
  const auto it = entries_.find(key);
  return it != entries_.end() ? &it->second : nullptr;
}

std::string Reader::place_of(const std::string& key) const {
  const Entry* e = find_written(key);
  return e ? e->key_place() : source_;
}

void Reader::check_all_read() const {
  for (const auto& [key, entry] : entries_) {
    TORCH_INTERNAL_ASSERT(read_.contains(key), "run config key '", key, "' was collected but never read");
  }
}

bool Reader::boolean(const std::string& key, bool fallback) {
  const Entry* e = find(key);
  return e ? guarded(key, fallback, [&] { return boolean_of(*e); }) : fallback;
}

int64_t Reader::integer(const std::string& key, int64_t fallback, Range range, const std::string& fix) {
  const Entry* e = find(key);
  return e ? guarded(key, fallback, [&] { return integer_of(*e, range, fix); }) : fallback;
}

double Reader::number(const std::string& key, double fallback, Range range, const std::string& fix) {
  const Entry* e = find(key);
  return e ? guarded(key, fallback, [&] { return number_of(*e, range, fix); }) : fallback;
}

double Reader::number_of(const Entry& e, Range range, const std::string& fix) const {
  const std::optional<double> v = e.value.IsScalar() ? parse_double(e.value.Scalar()) : std::nullopt;
  if (!v) {
    e.fail_value("expected a number, got " + shown(e.value) + "; " + fix);
  }
  if (!range.contains(*v)) {
    e.fail_value(range.problem(e.value.Scalar()) + "; " + fix);
  }
  return *v;
}

std::vector<double> Reader::numbers(const std::string& key, Range range, const std::string& fix) {
  const Entry* e = find(key);
  if (e == nullptr) return {};
  return guarded(key, std::vector<double>{}, [&] {
    std::vector<double> out;
    const auto read = [&](const YAML::Node& item) {
      const std::optional<double> v = item.IsScalar() ? parse_double(item.Scalar()) : std::nullopt;
      if (!v) e->fail_value("expected a list of numbers, got an item " + shown(item) + "; " + fix);
      if (!range.contains(*v)) e->fail_value(range.problem(item.Scalar()) + "; " + fix);
      out.push_back(*v);
    };
    if (e->value.IsSequence()) {
      for (const YAML::Node& item : e->value) read(item);
    } else {
      read(e->value);
    }
    return out;
  });
}

std::string Reader::choice(const std::string& key,
                           const std::string& fallback,
                           const std::vector<std::string>& allowed,
                           const std::string& fix,
                           const std::map<std::string, std::string>& aliases) {
  const Entry* e = find(key);
  return e ? guarded(key, fallback, [&] { return choice_of(*e, allowed, fix, aliases); }) : fallback;
}

fs::path Reader::path(const std::string& key, const fs::path& fallback) {
  const Entry* e = find(key);
  return resolve(e ? guarded(key, fallback, [&] { return path_of(*e); }) : fallback);
}

std::vector<std::string> Reader::strings(const std::string& key, const std::string& example) {
  const Entry* e = find(key);
  return e ? guarded(key, std::vector<std::string>{}, [&] { return strings_of(*e, example); })
           : std::vector<std::string>{};
}

std::string Reader::text(const std::string& key, const std::string& example) {
  const Entry* e = find(key);
  return e ? guarded(key, std::string{}, [&] { return text_of(*e, example); }) : std::string{};
}

std::vector<std::string> Reader::module_names(const std::string& key) {
  const Entry* e = find(key);
  return e ? guarded(key, std::vector<std::string>{}, [&] { return module_names_of(*e); }) : std::vector<std::string>{};
}

Reader::ModuleTargets Reader::module_targets(const std::string& key) {
  const Entry* e = find(key);
  if (e == nullptr) return {};
  return guarded(key, ModuleTargets{}, [&] {
    if (!e->value.IsScalar()) return ModuleTargets{module_names_of(*e), {}};
    const std::string& pattern = e->value.Scalar();
    if (pattern.empty()) e->fail_value("blank; write a list of module names such as [q_proj, v_proj]");
    // A bare name as the whole pattern matches only a top-level module of that name: every layer's
    // module path has dots. PEFT would find no target; say why here instead.
    const bool bare = std::all_of(pattern.begin(), pattern.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
    });
    if (bare && pattern != "lm_head") {
      e->fail_value("'" + pattern +
                    "' is one string, which PEFT reads as a regular expression the whole module name must match, "
                    "and no module name such as model.layers.0.self_attn." +
                    pattern + " is just that; write a list, e.g. [" + pattern + "], or a pattern, e.g. .*\\." +
                    pattern);
    }
    if (const std::string problem = lora::LoraConfig::regex_problem(pattern); !problem.empty()) {
      e->fail_value(problem);
    }
    return ModuleTargets{{}, pattern};
  });
}

std::vector<std::string> Reader::module_names_of(const Entry& e) const {
  if (!e.value.IsSequence()) {
    e.fail_value("expected a list of module names, got " + shown(e.value) + "; write e.g. [q_proj, v_proj]");
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
               "self_attn.q_proj (a list holds names; one string instead of the list is a regular expression)");
    }
    out.push_back(name);
  }
  return out;
}

std::vector<std::string> Reader::strings_of(const Entry& e, const std::string& example) const {
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

std::string Reader::text_of(const Entry& e, const std::string& example) const {
  if (!e.value.IsScalar()) {
    e.fail_value("expected a string, got " + shown(e.value) + "; write e.g. " + example);
  }
  return e.value.Scalar();
}

bool Reader::boolean_of(const Entry& e) const {
  const std::optional<bool> v = e.value.IsScalar() ? parse_bool(e.value.Scalar()) : std::nullopt;
  if (!v) {
    e.fail_value("expected true or false, got " + shown(e.value));
  }
  return *v;
}

int64_t Reader::integer_of(const Entry& e, Range range, const std::string& fix) const {
  const std::optional<int64_t> v = e.value.IsScalar() ? parse_int(e.value.Scalar()) : std::nullopt;
  if (!v) {
    e.fail_value("expected an integer, got " + shown(e.value) + "; " + fix);
  }
  if (!range.contains(static_cast<double>(*v))) {
    e.fail_value(range.problem(e.value.Scalar()) + "; " + fix);
  }
  return *v;
}

std::string Reader::choice_of(const Entry& e,
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

fs::path Reader::path_of(const Entry& e) const {
  if (!e.value.IsScalar()) {
    e.fail_value("expected a path, got " + shown(e.value));
  }
  return fs::path(e.value.Scalar());
}

fs::path Reader::resolve(const fs::path& p) const {
  if (p.empty() || p.is_absolute()) {
    return p.lexically_normal();
  }
  return (base_dir_ / p).lexically_normal();
}

}  // namespace qtrain::engine::config
