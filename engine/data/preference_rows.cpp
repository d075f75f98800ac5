// See preference_rows.h and Note [Preference rows] there.
#include "engine/data/preference_rows.h"

#include <c10/util/Exception.h>

#include "engine/text/jinja_error.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace qtrain::engine::data {
namespace {

bool is_messages(const nlohmann::ordered_json& v) {
  return v.is_array() && !v.empty() && v.front().is_object() && v.front().contains("role");
}

// The start of the UTF-8 character that holds byte `i` of `s` (Python indexes characters).
size_t character_start(const std::string& s, size_t i) {
  while (i > 0 && i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// TRL's extract_prompt on text: the index of the first differing character, one back where the
// character before it is a space; where one is a prefix of the other, the start of the shorter's
// last character (the index TRL's loop ends on).
size_t text_prompt_end(const std::string& chosen, const std::string& rejected) {
  const size_t n = std::min(chosen.size(), rejected.size());
  size_t i = 0;
  while (i < n && chosen[i] == rejected[i]) ++i;
  if (i == n) {
    // No difference within the shorter one: TRL's loop index ends on its last character.
    return n == 0 ? 0 : character_start(chosen, n - 1);
  }
  i = character_start(chosen, i);
  if (i > 0 && chosen[i - 1] == ' ') --i;
  return i;
}

// TRL's extract_prompt on messages: the first differing message, or the shorter list's last.
size_t messages_prompt_end(const nlohmann::ordered_json& chosen, const nlohmann::ordered_json& rejected) {
  const size_t n = std::min(chosen.size(), rejected.size());
  for (size_t i = 0; i < n; ++i) {
    if (chosen[i] != rejected[i]) return i;
  }
  return n == 0 ? 0 : n - 1;
}

nlohmann::ordered_json slice(const nlohmann::ordered_json& messages, size_t first, size_t last) {
  auto out = nlohmann::ordered_json::array();
  for (size_t i = first; i < last && i < messages.size(); ++i) out.push_back(messages[i]);
  return out;
}

size_t common_prefix_length(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
                             a.begin());
}

// Step 4: the completions split off where the tokenized prompt and prompt + completion diverge.
PreferencePair split_pair(std::vector<int64_t> prompt,
                          std::vector<int64_t> with_chosen,
                          std::vector<int64_t> with_rejected) {
  const size_t n = std::min(common_prefix_length(prompt, with_chosen), common_prefix_length(prompt, with_rejected));
  prompt.resize(n);
  return {std::move(prompt),
          std::vector<int64_t>(with_chosen.begin() + static_cast<std::ptrdiff_t>(n), with_chosen.end()),
          std::vector<int64_t>(with_rejected.begin() + static_cast<std::ptrdiff_t>(n), with_rejected.end())};
}

const nlohmann::ordered_json& field(const nlohmann::ordered_json& row, const char* key, const std::string& where) {
  const auto it = row.find(key);
  TORCH_CHECK(it != row.end() && !it->is_null(),
              where,
              ": a preference row needs \"chosen\" and \"rejected\" (text or messages, and \"prompt\" or not), or "
              "TRL's tokenized \"prompt_ids\", \"chosen_ids\" and \"rejected_ids\"; it has no \"",
              key,
              "\"");
  return *it;
}

PreferencePair text_pair(const nlohmann::ordered_json& row, const TextTokenizer& tokenizer, const std::string& where) {
  auto text = [&](const nlohmann::ordered_json& v, const char* key) {
    TORCH_CHECK(v.is_string(),
                where,
                ": \"",
                key,
                "\" must be text here (the row is not a conversation), found ",
                v.type_name());
    return v.get<std::string>();
  };
  const auto r = with_prompt(row, where);
  std::string chosen = text(field(r, "chosen", where), "chosen");
  std::string rejected = text(field(r, "rejected", where), "rejected");
  const std::string prompt = text(field(r, "prompt", where), "prompt");
  const auto eos = tokenizer.eos_token();
  for (auto* completion : {&chosen, &rejected}) {
    if (!completion->ends_with(eos)) *completion += eos;
  }
  auto ids = [&](const std::string& s) { return tokenizer.tokenize(s, /*add_special_tokens=*/true).ids; };
  return split_pair(ids(prompt), ids(prompt + chosen), ids(prompt + rejected));
}

PreferencePair conversation_pair(const nlohmann::ordered_json& row,
                                 const TextTokenizer& tokenizer,
                                 const text::ChatTemplate* chat_template,
                                 const std::string& where) {
  TORCH_CHECK(chat_template != nullptr,
              where,
              ": this preference row is a conversation, and the model's tokenizer has no chat template; set the "
              "dataset's chat_template to a named template (chatml, llama3, ...) or to jinja");
  auto messages = [&](const nlohmann::ordered_json& v, const char* key) {
    TORCH_CHECK(v.is_array(),
                where,
                ": \"",
                key,
                "\" must be a list of messages (the row is a conversation), found ",
                v.type_name());
    return v;
  };
  const auto r = with_prompt(row, where);
  const auto chosen = messages(field(r, "chosen", where), "chosen");
  const auto rejected = messages(field(r, "rejected", where), "rejected");
  const auto prompt = messages(field(r, "prompt", where), "prompt");
  auto ids = [&](const nlohmann::ordered_json& conversation, bool generation_prompt) {
    const auto rendered = render_chat(
        *chat_template, conversation, generation_prompt, tokenizer.bos_token(), tokenizer.eos_token(), where);
    return tokenizer.tokenize(rendered, /*add_special_tokens=*/false).ids;
  };
  auto joined = [&](const nlohmann::ordered_json& completion) {
    auto all = prompt;
    for (const auto& m : completion) all.push_back(m);
    return all;
  };
  return split_pair(ids(prompt, true), ids(joined(chosen), false), ids(joined(rejected), false));
}

}  // namespace

nlohmann::ordered_json with_prompt(const nlohmann::ordered_json& row, const std::string& where) {
  if (const auto it = row.find("prompt"); it != row.end() && !it->is_null()) return row;
  const auto& chosen = field(row, "chosen", where);
  const auto& rejected = field(row, "rejected", where);
  auto out = row;
  if (chosen.is_string() && rejected.is_string()) {
    const auto c = chosen.get<std::string>(), r = rejected.get<std::string>();
    const size_t end = text_prompt_end(c, r);
    out["prompt"] = c.substr(0, end);
    out["chosen"] = c.substr(end);
    out["rejected"] = r.substr(end);
  } else if (chosen.is_array() && rejected.is_array()) {
    const size_t end = messages_prompt_end(chosen, rejected);
    out["prompt"] = slice(chosen, 0, end);
    out["chosen"] = slice(chosen, end, chosen.size());
    out["rejected"] = slice(rejected, end, rejected.size());
  }
  return out;  // chosen and rejected of other types: tokenizing names them
}

std::string render_chat(const text::ChatTemplate& chat_template,
                        const nlohmann::ordered_json& messages,
                        bool generation_prompt,
                        const std::string& bos_token,
                        const std::string& eos_token,
                        const std::string& where) {
  text::ChatTemplateInput input;
  input.messages = messages;
  input.add_generation_prompt = generation_prompt;
  input.variables["bos_token"] = bos_token;
  input.variables["eos_token"] = eos_token;
  try {
    return chat_template.render(input).text;
  } catch (const text::TemplateError& e) {
    TORCH_CHECK(false, where, ": the chat template refused this conversation: ", e.what());
  }
}

bool is_conversational_row(const nlohmann::ordered_json& row) {
  for (const char* key : {"prompt", "chosen", "rejected"}) {
    if (const auto it = row.find(key); it != row.end() && is_messages(*it)) return true;
  }
  return false;
}

PreferencePair tokenize_preference_row(const nlohmann::ordered_json& row,
                                       const TextTokenizer& tokenizer,
                                       const text::ChatTemplate* chat_template,
                                       const std::string& where) {
  return is_conversational_row(row) ? conversation_pair(row, tokenizer, chat_template, where)
                                    : text_pair(row, tokenizer, where);
}

}  // namespace qtrain::engine::data
