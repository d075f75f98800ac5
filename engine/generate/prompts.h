// What `qtrain generate` and `qtrain chat` feed the model: prompts as plain text or as chat
// conversations, read from JSONL, turned into token ids as transformers does (a plain prompt
// through the tokenizer with its special tokens; a conversation through the chat template with
// the generation prompt, tokenized without adding special tokens, as apply_chat_template does),
// and the ids that end a completion.
#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"
#include "engine/data/text_tokenizer.h"
#include "engine/text/chat_template.h"

namespace qtrain::engine::generate {

// One prompt: `messages` (a conversation, [{"role", "content"}, ...]) when it is an array, else
// `text`.
struct Prompt {
  std::string text;
  nlohmann::ordered_json messages;
  bool is_chat() const { return messages.is_array(); }
};

// One prompt per non-empty line of `in`: {"prompt": "..."} (or "text"), {"messages": [...]} (or
// "conversations"), a JSON string; with `plain`, each line is the text itself. Errors name
// `source` and the line.
std::vector<Prompt> read_prompts(std::istream& in, const std::string& source, bool plain);

// The chat template `qtrain generate --chat` and `qtrain chat` use: `choice` when given (an
// axolotl template name, tokenizer_default, or the path of a .jinja file), else the run config's
// chat_template / chat_template_jinja (relative paths from `config_dir`), else the tokenizer's.
// Nullopt where there is none.
std::optional<std::string> chat_template_source(const config::RunConfig& c,
                                                const std::string& choice,
                                                const std::filesystem::path& config_dir,
                                                const data::TextTokenizer& tokenizer);

class PromptEncoder {
 public:
  // `chat_template`: the template's Jinja text (chat prompts need one); `chat`: plain prompts
  // become one user message (after `system`, when not empty).
  PromptEncoder(const data::TextTokenizer& tokenizer,
                const std::optional<std::string>& chat_template,
                bool chat,
                std::string system);

  // The prompt's ids: see the file comment.
  std::vector<int64_t> encode(const Prompt& prompt) const;
  // A conversation rendered with the generation prompt.
  std::string render(const nlohmann::ordered_json& messages) const;

 private:
  const data::TextTokenizer& tokenizer_;
  std::optional<text::ChatTemplate> template_;
  bool chat_;
  std::string system_;
};

// The ids that end a completion: the tokenizer's end-of-sequence, the config's eot_tokens and the
// eos_token_id (a number or a list) of base_model's generation_config.json, each once.
std::vector<int64_t> stop_ids(const config::RunConfig& c, const data::TextTokenizer& tokenizer);

}  // namespace qtrain::engine::generate
