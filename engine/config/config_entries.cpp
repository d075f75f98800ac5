// See config_entries.h.
#include "engine/config/config_entries.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <utility>

#include <yaml-cpp/eventhandler.h>

#include "engine/config/config_keys.h"
#include "engine/config/key_suggestion.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

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

void EntrySet::add(const std::string& key, Entry entry) {
  const auto it = entries_.find(key);
  if (it != entries_.end() && !entry.origin.is_set_argument()) {
    fail(entry.key_place(),
         entry.key,
         "duplicate key (first as " + it->second.key + " at " + it->second.key_place() + "); keep one of them");
  }
  entries_.insert_or_assign(key, std::move(entry));
}

void EntrySet::add_top_level(Entry entry) {
  const std::string key = entry.key;  // a copy: `entry` is moved below
  const auto& keys = run_config_keys();
  const auto& folded = folded_keys();
  if (std::find(keys.begin(), keys.end(), key) != keys.end() ||
      std::find(folded.begin(), folded.end(), key) != folded.end()) {
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
    candidates.insert(candidates.end(), folded.begin(), folded.end());
    candidates.push_back(kBnbKwargs);
    fail(entry.key_place(), key, unknown_key_message(key, candidates));
  }
}

void EntrySet::add_bnb_kwargs(const Entry& entry) {
  if (entry.value.IsNull()) {
    return;
  }
  if (!entry.value.IsMap()) {
    entry.fail_value("expected a map, got " + shown(entry.value) +
                     "; write e.g. bnb_config_kwargs: {bnb_4bit_quant_type: nf4}");
  }
  std::string prefix(kBnbKwargs);
  prefix += '.';
  for (Entry inner : map_entries(entry.value, entry.origin, prefix)) {
    const std::string name = inner.key.substr(prefix.size());
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

// Note [Stray comma]
// yaml-cpp 0.7 reads a `,` outside brackets at the top level as an empty document without
// consuming it, so YAML::LoadAll never returns on such a file (fuzz/run_config_fuzz found it; the
// regression test is in run_config_test.cpp). The documents are therefore counted first, up to
// kMaxYamlDocuments, by a parser pass that only counts, and the one document is loaded after.
namespace {

constexpr size_t kMaxYamlDocuments = 64;

class IgnoreEvents : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The YAML documents in `text`, counted up to kMaxYamlDocuments + 1 (See Note [Stray comma]).
size_t count_documents(const std::string& text) {
  size_t documents = 0;
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  IgnoreEvents ignore;
  while (documents <= kMaxYamlDocuments && parser.HandleNextDocument(ignore)) ++documents;
  return documents;
}

}  // namespace

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
  const std::string text = argument.substr(eq + 1);
  size_t documents = 0;
  try {
    documents = count_documents(text);
    // YAML::Load would keep the first document and drop the rest without a word.
    if (documents <= 1) entry.value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(origin.whole(),
         entry.key,
         "the value is not valid YAML (" + e.msg + "); quote it, or check the brackets of a list [a, b] or map {k: v}");
  }
  if (documents > 1) {
    fail(origin.whole(),
         entry.key,
         "the value holds several YAML documents (a --- line, or a , outside brackets); a value is one: quote it, "
         "or put a list in brackets [a, b]");
  }
  return entry;
}

YAML::Node load_document(const std::string& text, const std::string& source) {
  size_t documents = 0;
  YAML::Node root;
  try {
    documents = count_documents(text);
    if (documents == 1) root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    TORCH_CHECK(false,
                Origin::file(source).at(e.mark),
                ": invalid YAML: ",
                e.msg,
                "; fix the syntax at that place or just before it (an unclosed bracket or quote starts earlier): "
                "`key: value` lines, lists as [a, b] or `- item` lines, indentation with spaces");
  }
  TORCH_CHECK(documents <= kMaxYamlDocuments,
              source,
              ": invalid YAML: the parser finds more than ",
              kMaxYamlDocuments,
              " documents, which a `,` outside brackets causes (or as many `---` lines); a run config is one map "
              "of `key: value` lines: remove the stray comma or put the list in brackets [a, b]");
  TORCH_CHECK(documents <= 1,
              source,
              ": the file holds ",
              documents,
              " YAML documents (separated by ---); a run config is one");
  TORCH_CHECK(documents == 1 && !root.IsNull(),
              source,
              ": the file is empty; a run config is a YAML map such as `base_model: ./model` "
              "(see docs/CONFIG.md)");
  TORCH_CHECK(root.IsMap(),
              Origin::file(source).at(root.Mark()),
              ": the top level is ",
              root.IsSequence() ? "a list" : "a single value",
              ", not a map; a run config is `key: value` lines such as `base_model: ./model`");
  return root;
}

}  // namespace qtrain::engine::config
