// See chat_template_choice.h.
#include "engine/config/chat_template_choice.h"

#include <fstream>
#include <iterator>

#include <c10/util/Exception.h>

#include "engine/text/named_chat_template.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::config {

std::vector<std::string> chat_template_choices() {
  std::vector<std::string> choices = {"tokenizer_default", "jinja"};
  const std::vector<std::string> names = text::named_chat_template_names();
  choices.insert(choices.end(), names.begin(), names.end());
  for (const std::string& n : names) choices.push_back(std::string(text::kTokenizerDefaultFallbackPrefix) + n);
  return choices;
}

std::string chat_template_choice_help() {
  return "use tokenizer_default (the template in tokenizer_config.json), one of axolotl's template names (chatml, "
         "llama3, ...), tokenizer_default_fallback_<name> (the tokenizer's template, else that one) or jinja with "
         "chat_template_jinja (your own template: the Jinja text or a .jinja file)";
}

void apply_chat_template(const std::string& choice,
                         const std::string& jinja,
                         const std::function<std::filesystem::path(const std::filesystem::path&)>& resolve,
                         const std::string& choice_place,
                         const std::string& jinja_place,
                         DatasetConfig& d) {
  TORCH_CHECK(choice != "jinja" || !jinja.empty(),
              choice_place,
              ": chat_template: jinja needs chat_template_jinja (the Jinja text, or the path of a .jinja file)");
  if (choice.starts_with(text::kTokenizerDefaultFallbackPrefix)) {
    d.chat_template_fallback = text::named_chat_template(choice.substr(text::kTokenizerDefaultFallbackPrefix.size()));
    return;
  }
  if (const auto named = text::find_named_chat_template(choice)) {
    d.chat_template_source = *named;
    return;
  }
  if (choice != "jinja") return;
  // Inline Jinja has a tag; anything else is the path of a file, resolved like other paths.
  if (jinja.find("{{") != std::string::npos || jinja.find("{%") != std::string::npos) {
    d.chat_template_source = jinja;
    return;
  }
  const std::filesystem::path file = resolve(jinja);
  const auto problem = text::regular_file_problem(file, text::kMaxTemplateBytes);
  TORCH_CHECK(problem.empty(), jinja_place, ": chat_template_jinja: ", file.string(), " ", problem);
  std::ifstream in(file, std::ios::binary);
  TORCH_CHECK(in.good(),
              jinja_place,
              ": chat_template_jinja: cannot read '",
              file.string(),
              "'; give the path of a .jinja file or the template text itself");
  d.chat_template_source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace qtrain::engine::config
