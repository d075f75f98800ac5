// The table behind named_chat_template.h: each engine/text/chat_templates/*.jinja file as a
// name and its text, written into a generated .cpp at build time by
// engine/text/chat_templates/embed.cmake.
#pragma once

#include <string_view>
#include <vector>

namespace qtrain::engine::text {

struct NamedChatTemplateText {
  std::string_view name;  // the file name without .jinja
  std::string_view text;
};

const std::vector<NamedChatTemplateText>& named_chat_template_table();

}  // namespace qtrain::engine::text
