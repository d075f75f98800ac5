// axolotl's named chat templates (`chat_template: chatml`, `llama3`, `qwen3`, ...): the Jinja
// text for a name, so that an axolotl config that names a template renders what axolotl renders.
//
// The templates are written in this project (engine/text/chat_templates/*.jinja, compiled into
// the binary) and render byte for byte what axolotl's file of the same name renders through
// transformers; docs/DATA.md, "Named chat templates", says how that was checked.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qtrain::engine::text {

// axolotl's `tokenizer_default_fallback_<name>`: the tokenizer's own template, else <name>.
inline constexpr std::string_view kTokenizerDefaultFallbackPrefix = "tokenizer_default_fallback_";

// The names there are, sorted: chatml, gemma, gemma3, gemma4, llama3, mistral_v1, ...
std::vector<std::string> named_chat_template_names();

// The template's Jinja text, or nullopt when there is no template of that name.
std::optional<std::string> find_named_chat_template(std::string_view name);

// The template's Jinja text; an unknown name is a TemplateError that lists the names there are.
std::string named_chat_template(std::string_view name);

// The template `choice` means, as `qtrain tokenize --chat-template` takes it: "" or
// tokenizer_default (the tokenizer's template), a name, tokenizer_default_fallback_<name>, or
// the path of a Jinja file. `tokenizer_template` is the tokenizer's template, if it has one.
// Errors (no such name or file, no tokenizer template) are TemplateErrors that say what to give.
std::string choose_chat_template(const std::string& choice, const std::optional<std::string>& tokenizer_template);

}  // namespace qtrain::engine::text
