// See named_chat_template.h.
#include "engine/text/named_chat_template.h"

#include <algorithm>

#include "engine/text/jinja_error.h"
#include "engine/text/named_chat_template_table.h"

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

std::string named_chat_template(std::string_view name) {
  if (auto text = find_named_chat_template(name)) return *text;
  std::string names;
  for (const auto& n : named_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
  throw TemplateError("no chat template named '" + std::string(name) + "'; the named templates are " + names +
                      " (or give your own Jinja text: chat_template: jinja with chat_template_jinja)");
}

}  // namespace qtrain::engine::text
