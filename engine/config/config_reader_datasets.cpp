// See config_reader.h: the entries of `datasets`, each a map of its own keys.
#include "engine/config/config_reader.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "engine/config/chat_template_choice.h"
#include "engine/config/config_entries.h"
#include "engine/config/config_keys.h"
#include "engine/config/dataset_split.h"
#include "engine/config/key_suggestion.h"

namespace qtrain::engine::config {

namespace fs = std::filesystem;

template <class ValueOf>
void Reader::read_chat_keys(DatasetConfig& d, const ValueOf& value_of) const {
  // The chat_template.* preference types read the message keys and the template too.
  const bool chat = d.type == "chat_template" || d.type.starts_with("chat_template.");
  for (const std::string& name : preference_dataset_keys()) {
    const Entry* e = value_of(name);
    if (!e) continue;
    if (!d.type.starts_with("chat_template.")) {
      fail(e->key_place(),
           e->key,
           name +
               " applies only to types chat_template.default and chat_template.argilla_chat (this dataset's type is " +
               (d.type.empty() ? std::string("not set") : d.type) + "); remove it");
    }
    (name == "field_chosen" ? d.field_chosen : d.field_rejected) = text_of(*e, name + ": " + name.substr(6));
  }
  for (const std::string& name : chat_dataset_keys()) {
    const Entry* e = value_of(name);
    if (e && !chat) {
      fail(e->key_place(),
           e->key,
           name + " applies only to type: chat_template (this dataset's type is " +
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
    if (value_of("message_property_mappings") && value_of("message_property_mappings")->value[mapped] && target != v) {
      e->fail_value("'" + v + "' conflicts with message_property_mappings." + mapped + " '" + target +
                    "'; keep only message_property_mappings");
    }
    target = v;
  }
  if (const Entry* e = value_of("field_thinking")) {
    const std::string v = text_of(*e, "field_thinking: thinking");
    if (value_of("message_property_mappings") || value_of("message_field_role") || value_of("message_field_content")) {
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
  // The dataset's own template, in place of the top-level chat_template (read_config skips it).
  const Entry* jinja = value_of("chat_template_jinja");
  const Entry* choice = value_of("chat_template");
  if (!jinja && !choice) return;
  if (jinja) d.chat_template_jinja = text_of(*jinja, "chat_template_jinja: ./chatml.jinja");
  d.chat_template = choice ? choice_of(*choice, chat_template_choices(), chat_template_choice_help(), {}) : "jinja";
  apply_chat_template(
      d.chat_template,
      d.chat_template_jinja,
      [this](const fs::path& p) { return resolve(p); },
      choice ? choice->value_place() : jinja->value_place(),
      jinja ? jinja->value_place() : choice->value_place(),
      d);
}

// Note [Dataset files]
// axolotl's `path` is a local file or folder or a Hugging Face Hub id, loaded through
// `datasets` in any of its formats. qtrain reads one local file of JSON Lines or a JSON array of
// rows (.jsonl/.json), so the two other cases are caught here, where the config's line is
// known: a Parquet/CSV/Arrow file gets the one-line pandas conversion, and a path written as
// `org/name` that is no local file gets the `huggingface-cli download` command.
void Reader::check_local_file(const Entry& e, const fs::path& resolved) const {
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

std::string Reader::conversion_hint(const fs::path& path, const std::string& format) {
  const fs::path out = fs::path(path).replace_extension(".jsonl");
  if (format != "parquet" && format != "csv") {
    return "convert it to JSON Lines (one JSON object per line) and set path: to that file";
  }
  return "convert it with `python -c \"import pandas as pd; pd.read_" + format + "('" + path.string() + "').to_json('" +
         out.string() + "', orient='records', lines=True, force_ascii=False)\"` and set path: " + out.string();
}

UserDefinedType Reader::user_defined_type(const Entry& type) const {
  UserDefinedType u;
  const std::map<std::string, std::string*> keys = {{"field_prompt", &u.field_prompt},
                                                    {"field_system", &u.field_system},
                                                    {"field_chosen", &u.field_chosen},
                                                    {"field_rejected", &u.field_rejected},
                                                    {"field_completion", &u.field_completion},
                                                    {"field_label", &u.field_label},
                                                    {"prompt_format", &u.prompt_format},
                                                    {"chosen_format", &u.chosen_format},
                                                    {"rejected_format", &u.rejected_format},
                                                    {"completion_format", &u.completion_format}};
  for (const Entry& field : map_entries(type.value, type.origin, type.key + ".")) {
    const std::string name = field.key.substr(type.key.size() + 1);
    const auto it = keys.find(name);
    if (it == keys.end()) {
      const auto suggestion = nearest(name, user_defined_type_keys());
      fail(field.key_place(),
           field.key,
           "not a key of axolotl's user-defined preference type (" + join(user_defined_type_keys(), ", ") + ")" +
               (suggestion ? "; did you mean '" + *suggestion + "'?" : ""));
    }
    if (field.value.IsNull()) continue;  // None: the default, as axolotl's .get gives it
    if (!field.value.IsScalar() || (name.starts_with("field_") && field.value.Scalar().empty())) {
      field.fail_value(name.starts_with("field_")
                           ? "expected the row key that holds the text, got " + shown(field.value) + "; write e.g. " +
                                 name + ": " + name.substr(6)
                           : "expected a format string, got " + shown(field.value) + "; write e.g. " + name + ": \"{" +
                                 name.substr(0, name.size() - 7) + "}\"");
    }
    *it->second = field.value.Scalar();
  }
  return u;
}

DatasetConfig Reader::dataset(const Entry& list, size_t index) const {
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
  if (const Entry* split = value_of("split")) {
    d.split = text_of(*split, "split: train[:10%]");
    const std::string problem = parse_split(d.split).problem;
    if (!problem.empty()) split->fail_value(problem);
  }
  if (const Entry* type = value_of("type"); type && type->value.IsMap()) {
    d.type = "user_defined.default";
    d.user_defined = user_defined_type(*type);
  } else if (type) {
    std::vector<std::string> types = {"completion", "alpaca", "input_output", "chat_template", "pretokenized"};
    types.insert(types.end(), preference_dataset_types().begin(), preference_dataset_types().end());
    d.type = choice_of(*type,
                       types,
                       "use completion (a text field), alpaca (instruction/input/output), input_output "
                       "(segments), chat_template (messages) or pretokenized (input_ids), or leave type out for "
                       "rows that carry input_ids; with rl, one of axolotl's preference types (chatml.intel, "
                       "llama3.default, chat_template.default, ...), a map of a user-defined type's keys, or none for "
                       "TRL's prompt/chosen/rejected rows",
                       {});
    if (d.type == "user_defined.default") {
      type->fail_value(
          "axolotl's user-defined type is written as a map of its keys, e.g. type: {field_prompt: instruction, "
          "prompt_format: \"[INST] {prompt} [/INST]\"} (an empty map {} for TRL's field names)");
    }
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

std::vector<DatasetConfig> Reader::datasets(const std::string& key) {
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

}  // namespace qtrain::engine::config
