// See chat_dataset.h.
#include "engine/data/chat_dataset.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/text/chat_template.h"
#include "engine/text/jinja_error.h"

namespace qtrain::engine::data {
namespace {

// Note [Chat labels from character spans]
// As HF's return_assistant_tokens_mask (and unlike axolotl's per-turn re-rendering, which gives
// the same tokens for the families qtrain supports), a conversation is rendered once with the
// template (no generation prompt) and tokenized once with add_special_tokens=false: the template
// writes BOS itself. All labels start at -100. Then:
//   1. Each message's content is found in the rendered text, searching forward from the end of
//      the previous message's content (verbatim; failing that, with surrounding whitespace
//      stripped, for templates that trim). A template that rewrites the content is an error.
//   2. A turn whose role is in roles_to_train trains every token with at least one byte inside
//      its content span (a token straddling the boundary, e.g. "\n" merged with the content's
//      last character, is trained).
//   3. The turn ends at the token after its last content token. Within the 3 tokens from there,
//      the first token of eot_tokens (default [eos_token]), and separately the first EOS, are
//      trained when train_on_eos says so for this turn: turn (a trained turn), all (every turn),
//      last (the conversation's last turn), none.
//   4. A message with empty content trains nothing, not even its end of turn: an empty string is
//      found anywhere, so it has no place in the text.
// scripts/reference/chat_data_reference.py applies the same rules with transformers; the test
// compares the two token for token.
constexpr size_t kEotSearch = 3;

const std::map<std::string, std::string>& builtin_roles() {
  static const std::map<std::string, std::string> roles = {{"human", "user"},
                                                           {"user", "user"},
                                                           {"gpt", "assistant"},
                                                           {"assistant", "assistant"},
                                                           {"system", "system"},
                                                           {"tool", "tool"}};
  return roles;
}

std::string known_roles(const config::DatasetConfig& d) {
  std::set<std::string> names;
  for (const auto& [source, role] : builtin_roles()) names.insert(source);
  for (const auto& [source, role] : d.roles) names.insert(source);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// roles: first, then the built-in aliases.
std::optional<std::string> template_role(const std::string& source, const config::DatasetConfig& d) {
  if (const auto it = d.roles.find(source); it != d.roles.end()) return it->second;
  if (const auto it = builtin_roles().find(source); it != builtin_roles().end()) return it->second;
  return std::nullopt;
}

struct Turn {
  std::string role;  // the template's role
  std::string content;
};

std::vector<Turn> read_turns(const nlohmann::ordered_json& row,
                             const config::DatasetConfig& d,
                             const std::string& where) {
  const auto& field = d.field_messages;
  const auto it = row.find(field);
  TORCH_CHECK(it != row.end() && !it->is_null(),
              where,
              ": missing \"",
              field,
              "\"; a chat_template row is {\"",
              field,
              "\": [{\"",
              d.message_role,
              "\": \"user\", \"",
              d.message_content,
              "\": \"...\"}, ...]}; set the dataset's field_messages: to the key that holds the conversation");
  TORCH_CHECK(it->is_array(), where, ": \"", field, "\" must be a list of messages, found ", it->type_name());
  TORCH_CHECK(!it->empty(), where, ": \"", field, "\" is an empty conversation; remove the line");
  std::vector<Turn> turns;
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    const std::string at = where + ": " + field + "[" + std::to_string(i) + "]";
    TORCH_CHECK(
        m.is_object(), at, " must be an object {\"", d.message_role, "\": ..., \"", d.message_content, "\": ...}");
    for (const auto* key : {&d.message_role, &d.message_content}) {
      const auto v = m.find(*key);
      TORCH_CHECK(v != m.end() && v->is_string(),
                  at,
                  ".",
                  *key,
                  v == m.end() ? std::string(" is missing") : " must be a string, found " + std::string(v->type_name()),
                  "; map the message's keys with message_property_mappings: {role: ..., content: ...}");
    }
    const auto source = m[d.message_role].get<std::string>();
    const auto role = template_role(source, d);
    TORCH_CHECK(role.has_value(),
                at,
                ".",
                d.message_role,
                ": unknown role '",
                source,
                "' (known: ",
                known_roles(d),
                "); map it with roles: {assistant: [",
                source,
                "]}");
    turns.push_back({*role, m[d.message_content].get<std::string>()});
  }
  return turns;
}

// Byte span [begin, end) of `content` in `text` at or after `from`. See Note [Chat labels from
// character spans], rule 1.
std::pair<size_t, size_t> find_content(const std::string& text,
                                       const std::string& content,
                                       size_t from,
                                       const std::string& at) {
  if (const size_t p = text.find(content, from); p != std::string::npos) return {p, p + content.size()};
  const auto first = content.find_first_not_of(" \t\n\r");
  const auto stripped = first == std::string::npos
                            ? std::string()
                            : content.substr(first, content.find_last_not_of(" \t\n\r") - first + 1);
  const size_t p = text.find(stripped, from);
  TORCH_CHECK(p != std::string::npos,
              at,
              ": the chat template does not write this message's content as it is, so its tokens cannot be "
              "found; use a template that writes message content verbatim (chat_template: jinja)");
  return {p, p + stripped.size()};
}

std::vector<int64_t> token_ids(const std::vector<std::string>& names, const TextTokenizer& tokenizer) {
  std::vector<int64_t> ids;
  for (const auto& name : names) {
    const auto id = tokenizer.id_of(name);
    TORCH_CHECK(id.has_value(),
                "eot_tokens: '",
                name,
                "' is not a token of the model's tokenizer; use its end-of-turn token, e.g. <|im_end|>, "
                "<|eot_id|> or <end_of_turn>");
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace

std::vector<Sample> read_chat_template(const config::DatasetConfig& d, const TextTokenizer& tokenizer) {
  const auto source = d.chat_template_source.empty() ? tokenizer.chat_template() : d.chat_template_source;
  TORCH_CHECK(source.has_value(),
              d.path.string(),
              ": type chat_template needs a chat template, and the model's tokenizer_config.json has none; set "
              "chat_template: jinja and chat_template_jinja: (the Jinja text or a .jinja file)");
  const text::ChatTemplate chat_template(*source);
  const auto eot =
      token_ids(d.eot_tokens.empty() ? std::vector<std::string>{tokenizer.eos_token()} : d.eot_tokens, tokenizer);
  const std::vector<int64_t> eos = {tokenizer.eos_id()};
  const std::set<std::string> trained_roles(d.roles_to_train.begin(), d.roles_to_train.end());

  std::vector<Sample> samples;
  for_each_jsonl_row(d.path, [&](const nlohmann::ordered_json& row, const std::string& where) {
    const auto turns = read_turns(row, d, where);
    text::ChatTemplateInput input;
    for (const auto& t : turns) input.messages.push_back({{"role", t.role}, {"content", t.content}});
    if (const auto tools = row.find("tools"); tools != row.end() && !tools->is_null()) {
      input.tools = *tools;  // in the file's key order, as the template's tojson writes it
    }
    input.variables["bos_token"] = tokenizer.bos_token();
    input.variables["eos_token"] = tokenizer.eos_token();
    std::string rendered;
    try {
      rendered = chat_template.render(input).text;
    } catch (const text::TemplateError& e) {
      TORCH_CHECK(false, where, ": the chat template refused this conversation: ", e.what());
    }
    const auto tokens = tokenizer.tokenize(rendered, /*add_special_tokens=*/false);
    Sample s;
    s.input_ids = tokens.ids;
    s.labels.assign(tokens.ids.size(), -100);
    size_t cursor = 0;
    for (size_t i = 0; i < turns.size(); ++i) {
      if (turns[i].content.empty()) continue;  // rule 4
      const auto at = where + ": " + d.field_messages + "[" + std::to_string(i) + "]";
      const auto [begin, end] = find_content(rendered, turns[i].content, cursor, at);
      cursor = end;
      const bool train = trained_roles.count(turns[i].role) > 0;
      // The turn ends at the token after its last content token.
      size_t turn_end = 0;
      for (size_t k = 0; k < tokens.ids.size(); ++k) {
        const auto [a, b] = tokens.spans[k];
        const bool inside = a < b && a < end && b > begin;
        if (inside && train) s.labels[k] = tokens.ids[k];
        if (inside || (b > a && a < begin)) turn_end = k + 1;
      }
      const bool eos_here = d.train_on_eos == "all" || (d.train_on_eos == "turn" && train) ||
                            (d.train_on_eos == "last" && i + 1 == turns.size());
      if (!eos_here) continue;
      for (const auto* ids : {&eot, &eos}) {
        for (size_t k = turn_end; k < std::min(turn_end + kEotSearch, tokens.ids.size()); ++k) {
          if (std::find(ids->begin(), ids->end(), tokens.ids[k]) != ids->end()) {
            s.labels[k] = tokens.ids[k];
            break;
          }
        }
      }
    }
    samples.push_back(std::move(s));
  });
  return samples;
}

}  // namespace qtrain::engine::data
