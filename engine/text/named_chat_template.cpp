// See named_chat_template.h.
#include "engine/text/named_chat_template.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "engine/text/jinja_error.h"
#include "engine/text/named_chat_template_table.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::text {

std::vector<std::string> named_chat_template_names() {
  std::vector<std::string> names;
  for (const auto& t : named_chat_template_table()) names.emplace_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> find_named_chat_template(std::string_view name) {
  for (const auto& t : named_chat_template_table()) {
    if (t.name == name) return std::string(t.text);
  }
  return std::nullopt;
}

namespace {

std::string names_list() {
  std::string names;
  for (const auto& n : named_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

}  // namespace

std::string named_chat_template(std::string_view name) {
  if (auto text = find_named_chat_template(name)) return *text;
  throw TemplateError("no chat template named '" + std::string(name) + "'; the named templates are " + names_list() +
                      " (or give your own Jinja text: chat_template: jinja with chat_template_jinja)");
}

std::string choose_chat_template(const std::string& choice, const std::optional<std::string>& tokenizer_template) {
  if (choice.empty() || choice == "tokenizer_default") {
    if (tokenizer_template) return *tokenizer_template;
    throw TemplateError(
        "the tokenizer has no chat template (tokenizer_config.json has no \"chat_template\"); name one (" +
        names_list() + ") or give a .jinja file (qtrain tokenize: --chat-template)");
  }
  if (auto text = find_named_chat_template(choice)) return *text;
  if (choice.starts_with(kTokenizerDefaultFallbackPrefix)) {
    return tokenizer_template ? *tokenizer_template
                              : named_chat_template(choice.substr(kTokenizerDefaultFallbackPrefix.size()));
  }
  if (auto problem = regular_file_problem(choice, kMaxTemplateBytes); !problem.empty()) {
    throw TemplateError("chat template file " + choice + " " + problem);
  }
  std::ifstream in(choice, std::ios::binary);
  if (!in) {
    throw TemplateError("chat template '" + choice + "' is neither a named template (" + names_list() +
                        ", tokenizer_default, tokenizer_default_fallback_<name>) nor a readable file; give one of "
                        "those names or the path of a .jinja file");
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace qtrain::engine::text
