// `chat_template` as axolotl takes it, at the top level of a run config or in one dataset entry:
// tokenizer_default (the template in tokenizer_config.json), jinja (the template in
// chat_template_jinja: inline Jinja text or the path of a .jinja file), one of axolotl's template
// names (engine/text/named_chat_template.h), or tokenizer_default_fallback_<name> (the tokenizer's
// template, else that one).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace qtrain::engine::config {

// Every value chat_template takes, and what to write instead of another.
std::vector<std::string> chat_template_choices();
std::string chat_template_choice_help();

// Sets d.chat_template_source and d.chat_template_fallback to what `choice` means. `jinja` is
// chat_template_jinja: text with a `{{` or `{%` tag is the template, anything else the path of a
// file, resolved with `resolve`. Errors name `choice_place` (jinja without chat_template_jinja)
// or `jinja_place` (a file that cannot be read).
void apply_chat_template(const std::string& choice,
                         const std::string& jinja,
                         const std::function<std::filesystem::path(const std::filesystem::path&)>& resolve,
                         const std::string& choice_place,
                         const std::string& jinja_place,
                         DatasetConfig& d);

}  // namespace qtrain::engine::config
