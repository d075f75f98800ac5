// See chat_template.h.
#include "engine/text/chat_template.h"

#include "engine/text/jinja_error.h"
#include "engine/text/jinja_parser.h"

namespace qtrain::engine::text {

namespace {

// transformers (_alias_reasoning_fields): a message whose reasoning is under
// "reasoning_content", "thinking" or "reasoning" (the first non-null, in that order) becomes
// {"thinking": r, **message, "reasoning_content": r}, so templates can read either name.
nlohmann::ordered_json alias_reasoning(const nlohmann::ordered_json& message) {
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const auto it = message.find(key);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning == nullptr) return message;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["thinking"] = *reasoning;
  for (const auto& [k, v] : message.items()) out[k] = v;
  out["reasoning_content"] = *reasoning;
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string name) : name_(std::move(name)), source_(std::move(source)) {
  auto body = std::make_shared<Body>(parse_template(source_, name_));
  check_template_names(*body, name_, source_);
  body_ = std::move(body);
}

Rendered ChatTemplate::render(const ChatTemplateInput& input) const {
  if (!input.messages.is_array()) {
    throw TemplateError("chat template '" + name_ + "': messages must be a JSON array of message objects, got " +
                        std::string(input.messages.type_name()));
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < input.messages.size(); ++i) {
    const auto& m = input.messages[i];
    if (!m.is_object()) {
      throw TemplateError("chat template '" + name_ + "': message " + std::to_string(i) +
                          " must be an object like {\"role\": \"user\", \"content\": \"...\"}, got " + m.dump());
    }
    messages.push_back(alias_reasoning(m));
  }
  if (!input.variables.is_object()) {
    throw TemplateError("chat template '" + name_ + "': the extra variables must be a JSON object");
  }
  Variables vars;
  try {
    for (const auto& [k, v] : input.variables.items()) vars.emplace_back(k, Value::from_json(v));
    vars.emplace_back("messages", Value::from_json(messages));
    vars.emplace_back("tools", Value::from_json(input.tools));
    vars.emplace_back("documents", Value::from_json(input.documents));
    vars.emplace_back("add_generation_prompt", Value::boolean(input.add_generation_prompt));
  } catch (const JinjaRuntimeError& e) {
    throw TemplateError("chat template '" + name_ + "': " + e.what());
  }
  return render_template(*body_, name_, source_, vars, options_);
}

std::string chat_template_from_tokenizer_config(const nlohmann::ordered_json& config, const std::string& name) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    throw TemplateError(
        "tokenizer_config.json has no \"chat_template\": set chat_template in the dataset config to a built-in name "
        "or give chat_template_jinja");
  }
  if (it->is_string()) {
    if (name == "default") return it->get<std::string>();
    throw TemplateError("tokenizer_config.json has one chat template (\"default\"), not one named '" + name + "'");
  }
  std::string names;
  if (it->is_array()) {
    for (const auto& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template")) continue;
      if (t["name"] == name) return t["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + t["name"].get<std::string>();
    }
  }
  throw TemplateError("tokenizer_config.json has no chat template named '" + name + "' (it has: " + names + ")");
}

}  // namespace qtrain::engine::text
