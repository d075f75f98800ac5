// See tokenize_command.h.
#include "apps/tokenize_command.h"

#include <iostream>

#include "engine/text/tokenize_lines.h"
#include "engine/text/tokenizer.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string tokenizer;
  bool add_special_tokens = false;
};

void run(const Options& o) {
  std::ios::sync_with_stdio(false);
  const auto tokenizer = engine::text::Tokenizer::load(o.tokenizer);
  engine::text::tokenize_lines(tokenizer, std::cin, std::cout, o.add_special_tokens);
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
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
