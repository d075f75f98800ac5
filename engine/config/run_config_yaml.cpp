// Writing a RunConfig back as YAML (to_yaml): every key resolved, in the order of the run config
// table (Note [Run config table]), in a form that parse_run_config reads back to the same config.
#include <sstream>
#include <string>

#include "engine/config/run_config.h"
#include "engine/config/run_config_table.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

std::string datasets_yaml(const std::vector<DatasetConfig>& datasets) {
  if (datasets.empty()) return "[]";
  std::ostringstream out;
  for (const DatasetConfig& d : datasets) {
    out << "  - path: " << yaml_quoted(d.path.string()) << "\n";
    if (d.type == "user_defined.default") {
      // axolotl's form of this type: `type:` as a map.
      const UserDefinedType& u = d.user_defined;
      out << "    type: {field_prompt: " << yaml_quoted(u.field_prompt)
          << ", field_system: " << yaml_quoted(u.field_system) << ", field_chosen: " << yaml_quoted(u.field_chosen)
          << ", field_rejected: " << yaml_quoted(u.field_rejected)
          << ", field_completion: " << yaml_quoted(u.field_completion)
          << ", field_label: " << yaml_quoted(u.field_label) << ", prompt_format: " << yaml_quoted(u.prompt_format)
          << ", chosen_format: " << yaml_quoted(u.chosen_format)
          << ", rejected_format: " << yaml_quoted(u.rejected_format)
          << ", completion_format: " << yaml_quoted(u.completion_format) << "}\n";
    } else if (!d.type.empty()) {
      out << "    type: " << d.type << "\n";
    }
    if (!d.split.empty()) out << "    split: " << yaml_quoted(d.split) << "\n";
    if (d.type == "completion") {
      out << "    field: " << yaml_quoted(d.field) << "\n";
    }
    if (d.type.starts_with("chat_template.")) {
      // The chat_template.* preference types (engine/data/preference_types.h).
      out << "    field_messages: " << yaml_quoted(d.field_messages) << "\n";
      out << "    field_chosen: " << yaml_quoted(d.field_chosen) << "\n";
      out << "    field_rejected: " << yaml_quoted(d.field_rejected) << "\n";
      out << "    message_property_mappings: {role: " << yaml_quoted(d.message_role)
          << ", content: " << yaml_quoted(d.message_content) << "}\n";
      if (!d.roles.empty()) {
        out << "    roles:\n";
        for (const auto& [source, role] : d.roles)
          out << "      " << yaml_quoted(role) << ": [" << yaml_quoted(source) << "]\n";
      }
      if (!d.chat_template.empty()) out << "    chat_template: " << d.chat_template << "\n";
      if (!d.chat_template_jinja.empty())
        out << "    chat_template_jinja: " << yaml_quoted(d.chat_template_jinja) << "\n";
    }
    if (d.type == "chat_template") {
      out << "    field_messages: " << yaml_quoted(d.field_messages) << "\n";
      out << "    message_property_mappings: {role: " << yaml_quoted(d.message_role)
          << ", content: " << yaml_quoted(d.message_content);
      for (const auto& [key, source] : d.message_properties) out << ", " << key << ": " << yaml_quoted(source);
      out << "}\n";
      if (!d.roles.empty()) {
        out << "    roles:\n";
        for (const auto& [source, role] : d.roles)
          out << "      " << yaml_quoted(role) << ": [" << yaml_quoted(source) << "]\n";
      }
      out << "    roles_to_train: " << yaml_list(d.roles_to_train) << "\n";
      out << "    train_on_eos: " << d.train_on_eos << "\n";
      if (!d.train_on_eot.empty()) out << "    train_on_eot: " << d.train_on_eot << "\n";
      if (!d.message_field_training.empty()) {
        out << "    message_field_training: " << yaml_quoted(d.message_field_training) << "\n";
      }
      if (!d.message_field_training_detail.empty()) {
        out << "    message_field_training_detail: " << yaml_quoted(d.message_field_training_detail) << "\n";
      }
      out << "    field_tools: " << yaml_quoted(d.field_tools) << "\n";
      out << "    drop_system_message: " << yaml_bool(d.drop_system_message) << "\n";
      if (!d.chat_template.empty()) out << "    chat_template: " << d.chat_template << "\n";
      if (!d.chat_template_jinja.empty())
        out << "    chat_template_jinja: " << yaml_quoted(d.chat_template_jinja) << "\n";
    }
  }
  std::string text = out.str();
  text.pop_back();  // the last newline: to_yaml ends the key's line
  return "\n" + text;
}

std::string to_yaml(const RunConfig& c) {
  std::ostringstream out;
  out << "# qtrain run config with every key resolved (docs/CONFIG.md)\n";
  for (const auto& key : run_config_table()) {
    const std::string value = key.yaml(c);
    out << key.name << ":" << (value.starts_with('\n') ? "" : " ") << value << "\n";
  }
  return out.str();
}

}  // namespace qtrain::engine::config
