// See tokenize_command.h.
#include "apps/tokenize_command.h"

#include <iostream>

#include "engine/text/named_chat_template.h"
#include "engine/text/tokenize_lines.h"
#include "engine/text/tokenizer.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string tokenizer;
  bool add_special_tokens = false;
  bool chat = false;
  std::string chat_template;
  bool add_generation_prompt = false;
};

void run(const Options& o) {
  std::ios::sync_with_stdio(false);
  const auto tokenizer = engine::text::Tokenizer::load(o.tokenizer);
  if (o.chat) {
    const engine::text::ChatTemplate chat_template(
        engine::text::choose_chat_template(o.chat_template, tokenizer.config().chat_template),
        o.chat_template.empty() ? "tokenizer_default" : o.chat_template);
    engine::text::tokenize_chat_lines(tokenizer, chat_template, std::cin, std::cout, o.add_generation_prompt);
  } else {
    engine::text::tokenize_lines(tokenizer, std::cin, std::cout, o.add_special_tokens);
  }
  std::cout.flush();
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Tokenize each line of stdin with a Hugging Face tokenizer.json; print one JSON array of ids per line");
  cmd->add_option("--tokenizer", o->tokenizer, "folder with tokenizer.json (and tokenizer_config.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--add-special-tokens",
                o->add_special_tokens,
                "add what the tokenizer's post-processor adds (e.g. BOS), as HF add_special_tokens=True");
  auto* chat =
      cmd->add_flag("--chat",
                    o->chat,
                    "each line is a conversation (a JSON list of messages, or {\"messages\", \"tools\"}): render "
                    "it with the chat template, then tokenize it without special tokens, as "
                    "apply_chat_template(tokenize=True)");
  cmd->add_option("--chat-template",
                  o->chat_template,
                  "with --chat: a named template (chatml, llama3, qwen3, ...), tokenizer_default_fallback_<name>, or a "
                  ".jinja file (default: the tokenizer's)")
      ->needs(chat);
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt, "with --chat: end with the assistant's header")
      ->needs(chat);
  chat->excludes("--add-special-tokens");
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
