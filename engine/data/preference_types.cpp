// See preference_types.h and Note [Preference types] there.
#include "engine/data/preference_types.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>

#include "engine/config/config_keys.h"
#include "engine/data/preference_rows.h"
#include "engine/data/user_defined_type.h"

namespace qtrain::engine::data {
namespace {

// A family's markup for chatml.* and llama3.*: a turn's header is open + role + close; `end`
// closes a turn; `between` follows it before the next turn's header.
struct Markup {
  std::string open, close, end, between;
  std::string header(const std::string& role) const { return open + role + close; }
  // A whole turn, then what comes before the next.
  std::string turn(const std::string& role, const std::string& text) const {
    return header(role) + text + end + between;
  }
};

const Markup kChatml{"<|im_start|>", "\n", "<|im_end|>", "\n"};
const Markup kLlama3{"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", ""};

// The system turn (where the row has a non-empty "system": Python's truthiness) and the user turn
// of `user`, ending with the assistant's header.
std::string markup_prompt(const Markup& m, const nlohmann::ordered_json& row, const std::string& user) {
  std::string prompt;
  if (const auto it = row.find("system"); it != row.end() && it->is_string() && !it->get<std::string>().empty()) {
    prompt = m.turn("system", it->get<std::string>());
  }
  return prompt + m.turn("user", user) + m.header("assistant");
}

std::string text_at(const nlohmann::ordered_json& row, const std::string& key, const std::string& where) {
  const auto it = row.find(key);
  TORCH_CHECK(
      it != row.end() && it->is_string(),
      where,
      ": this dataset's type reads the text of \"",
      key,
      "\", and the row ",
      it == row.end() ? std::string("has no such field") : "holds a " + std::string(it->type_name()) + " there");
  return it->get<std::string>();
}

// The content of message `index` of the list `key` (argilla_chat, ultra).
std::string message_content(const nlohmann::ordered_json& row,
                            const std::string& key,
                            size_t index,
                            const std::string& where) {
  const auto it = row.find(key);
  TORCH_CHECK(it != row.end() && it->is_array() && it->size() > index && (*it)[index].is_object() &&
                  (*it)[index].contains("content") && (*it)[index]["content"].is_string(),
              where,
              ": this dataset's type reads \"",
              key,
              "\"[",
              index,
              "][\"content\"] (a list of messages with text content), and the row has none there");
  return (*it)[index]["content"].get<std::string>();
}

// The first of `keys` the row has.
std::string first_key(const nlohmann::ordered_json& row, const std::vector<std::string>& keys) {
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    if (row.contains(keys[i])) return keys[i];
  }
  return keys.back();
}

nlohmann::ordered_json markup_row(const Markup& m,
                                  const std::string& variant,
                                  const nlohmann::ordered_json& row,
                                  const std::string& where) {
  std::string user, chosen, rejected;
  if (variant == "argilla_chat") {
    user = message_content(row, "chosen", 0, where);
    chosen = message_content(row, "chosen", 1, where);
    rejected = message_content(row, "rejected", 1, where);
  } else {
    const std::string user_key = variant == "icr"     ? "input"
                                 : variant == "intel" ? "question"
                                 : variant == "argilla" || variant == "default"
                                     ? first_key(row, {"prompt", "input", "question", "instruction"})
                                     : "prompt";
    user = text_at(row, user_key, where);
    if (variant == "ultra") {
      chosen = message_content(row, "chosen", 1, where);
      rejected = message_content(row, "rejected", 1, where);
    } else {
      const bool responses = variant == "argilla" || variant == "default";
      chosen = text_at(row, responses ? first_key(row, {"chosen", "chosen_response"}) : "chosen", where);
      rejected = text_at(row, responses ? first_key(row, {"rejected", "rejected_response"}) : "rejected", where);
    }
  }
  // argilla_chat writes no system turn.
  const std::string prompt =
      variant == "argilla_chat" ? m.turn("user", user) + m.header("assistant") : markup_prompt(m, row, user);
  return {{"prompt", prompt}, {"chosen", chosen + m.end}, {"rejected", rejected + m.end}};
}

// A message of the row as the template reads it: its role mapped, its content.
nlohmann::ordered_json template_message(const config::DatasetConfig& d,
                                        const nlohmann::ordered_json& m,
                                        const std::string& where) {
  TORCH_CHECK(
      m.is_object() && m.contains(d.message_role) && m[d.message_role].is_string() && m.contains(d.message_content),
      where,
      ": a message needs \"",
      d.message_role,
      "\" and \"",
      d.message_content,
      "\" (message_property_mappings), found ",
      m.dump());
  std::string role = m[d.message_role].get<std::string>();
  if (const auto it = d.roles.find(role); it != d.roles.end()) {
    role = it->second;
  } else if (role == "human") {
    role = "user";
  } else if (role == "gpt") {
    role = "assistant";
  }
  return {{"role", role}, {"content", m[d.message_content]}};
}

// A completion field: text (an assistant message), a message, or a list whose last message counts.
nlohmann::ordered_json completion_message(const config::DatasetConfig& d,
                                          const nlohmann::ordered_json& row,
                                          const std::string& field,
                                          const std::string& where) {
  const auto it = row.find(field);
  TORCH_CHECK(
      it != row.end() && !it->is_null(), where, ": the row has no \"", field, "\" (field_chosen / field_rejected)");
  if (it->is_string()) return {{"role", "assistant"}, {"content", *it}};
  if (it->is_object()) return template_message(d, *it, where);
  TORCH_CHECK(it->is_array() && !it->empty(), where, ": \"", field, "\" must be text, a message or a list of messages");
  return template_message(d, it->back(), where);
}

// axolotl's rendering of one completion after a dummy user message, cut where its content starts
// (Python's find: where it is absent, the last character) and right-stripped.
std::string rendered_completion(const text::ChatTemplate& t,
                                const nlohmann::ordered_json& message,
                                const std::string& bos_token,
                                const std::string& eos_token,
                                const std::string& where) {
  const nlohmann::ordered_json dummy = {{"role", "user"}, {"content", "[[dummy_message]]"}};
  const std::string text =
      render_chat(t, nlohmann::ordered_json::array({dummy, message}), false, bos_token, eos_token, where);
  const std::string content = message["content"].is_string() ? message["content"].get<std::string>() : "";
  const size_t at = text.find(content);
  std::string out = at == std::string::npos ? (text.empty() ? "" : text.substr(text.size() - 1)) : text.substr(at);
  // Python's str.rstrip(): ASCII whitespace here (the templates end turns with newlines).
  while (!out.empty() && std::string_view(" \t\n\r\v\f").find(out.back()) != std::string_view::npos) out.pop_back();
  return out;
}

nlohmann::ordered_json chat_template_row(const config::DatasetConfig& d,
                                         const std::string& variant,
                                         const nlohmann::ordered_json& row,
                                         const text::ChatTemplate* t,
                                         const std::string& bos_token,
                                         const std::string& eos_token,
                                         const std::string& where) {
  TORCH_CHECK(t != nullptr,
              where,
              ": type ",
              d.type,
              " needs a chat template, and the model's tokenizer has none; set chat_template to a named template "
              "(chatml, llama3, ...) or to jinja");
  auto prompt = nlohmann::ordered_json::array();
  nlohmann::ordered_json chosen, rejected;
  if (variant == "default") {
    const auto it = row.find(d.field_messages);
    TORCH_CHECK(it != row.end() && (it->is_string() || it->is_array()),
                where,
                ": the row has no \"",
                d.field_messages,
                "\" (field_messages) holding a list of messages or a text");
    if (it->is_string()) {
      prompt.push_back({{"role", "user"}, {"content", *it}});
    } else {
      for (const auto& m : *it) prompt.push_back(template_message(d, m, where));
    }
    chosen = completion_message(d, row, d.field_chosen, where);
    rejected = completion_message(d, row, d.field_rejected, where);
  } else {
    const auto c = row.find(d.field_chosen), r = row.find(d.field_rejected);
    TORCH_CHECK(c != row.end() && c->is_array() && !c->empty() && r != row.end() && r->is_array() && !r->empty(),
                where,
                ": type chat_template.argilla_chat reads \"",
                d.field_chosen,
                "\" and \"",
                d.field_rejected,
                "\" as lists of messages");
    for (size_t i = 0; i + 1 < c->size(); ++i) prompt.push_back(template_message(d, (*c)[i], where));
    chosen = template_message(d, c->back(), where);
    rejected = template_message(d, r->back(), where);
  }
  return {{"prompt", render_chat(*t, prompt, true, bos_token, eos_token, where)},
          {"chosen", rendered_completion(*t, chosen, bos_token, eos_token, where)},
          {"rejected", rendered_completion(*t, rejected, bos_token, eos_token, where)}};
}

}  // namespace

bool is_preference_type(std::string_view type) {
  const auto& names = config::preference_dataset_types();
  return std::find(names.begin(), names.end(), type) != names.end();
}

nlohmann::ordered_json preference_type_row(const config::DatasetConfig& d,
                                           const nlohmann::ordered_json& row,
                                           const text::ChatTemplate* chat_template,
                                           const std::string& bos_token,
                                           const std::string& eos_token,
                                           const std::string& where) {
  TORCH_CHECK(is_preference_type(d.type), "preference_type_row: '", d.type, "' is not a preference type");
  if (d.type == "user_defined.default") return user_defined_row(d.user_defined, row, /*kto=*/false, where);
  const auto dot = d.type.find('.');
  const std::string family = d.type.substr(0, dot), variant = d.type.substr(dot + 1);
  if (family == "chat_template") return chat_template_row(d, variant, row, chat_template, bos_token, eos_token, where);
  TORCH_CHECK(d.type != "llama3.argilla",
              where,
              ": llama3.argilla is one of axolotl's KTO types (rl: kto); for pairs use llama3.default, which reads "
              "the same fields");
  return markup_row(family == "chatml" ? kChatml : kLlama3, variant, row, where);
}

bool is_kto_type(std::string_view type) {
  if (type == "user_defined.default") return true;
  const auto dot = type.find('.');
  if (dot == std::string_view::npos) return false;
  const auto family = type.substr(0, dot), variant = type.substr(dot + 1);
  const std::vector<std::string_view> variants = {"argilla", "argilla_chat", "intel", "prompt_pairs", "ultra"};
  return (family == "chatml" || family == "llama3") &&
         std::find(variants.begin(), variants.end(), variant) != variants.end();
}

nlohmann::ordered_json kto_type_row(const config::DatasetConfig& d,
                                    const nlohmann::ordered_json& row,
                                    const std::string& where) {
  TORCH_CHECK(is_kto_type(d.type),
              where,
              ": rl: kto reads axolotl's KTO types, chatml.* and llama3.* with argilla, argilla_chat, intel, "
              "prompt_pairs or ultra, and the user-defined type; ",
              d.type,
              " is not one of them");
  if (d.type == "user_defined.default") return user_defined_row(d.user_defined, row, /*kto=*/true, where);
  const auto dot = d.type.find('.');
  const std::string family = d.type.substr(0, dot), variant = d.type.substr(dot + 1);
  const Markup& m = family == "chatml" ? kChatml : kLlama3;
  std::string prompt, completion;
  if (variant == "argilla_chat") {
    const auto it = row.find("completion");
    TORCH_CHECK(it != row.end() && it->is_array() && it->size() >= 2,
                where,
                ": ",
                d.type,
                " reads the conversation in \"completion\" (a list of at least two messages)");
    if (family == "chatml") {
      // chatml: the first message as the user turn, the second as the completion.
      prompt = m.turn("user", message_content(row, "completion", 0, where)) + m.header("assistant");
      completion = message_content(row, "completion", 1, where);
    } else {
      // llama3: every message before the last in its role, the last as the completion.
      const size_t last = it->size() - 1;
      for (size_t i = 0; i < last; ++i) {
        const auto& message = (*it)[i];
        TORCH_CHECK(message.is_object() && message.contains("role") && message["role"].is_string(),
                    where,
                    ": \"completion\"[",
                    i,
                    "] needs a \"role\"");
        prompt += m.turn(message["role"].get<std::string>(), message_content(row, "completion", i, where));
      }
      prompt += m.header("assistant");
      completion = message_content(row, "completion", last, where);
    }
  } else {
    const std::string user_key = variant == "argilla" ? "instruction" : variant == "intel" ? "question" : "prompt";
    prompt = markup_prompt(m, row, text_at(row, user_key, where));
    completion = text_at(row, "completion", where);
  }
  nlohmann::ordered_json out = {{"prompt", prompt}, {"completion", completion + m.end}};
  if (row.contains("label")) out["label"] = row.at("label");  // else reading the row names it
  return out;
}

}  // namespace qtrain::engine::data
