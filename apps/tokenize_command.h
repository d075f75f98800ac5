// `qtrain tokenize --tokenizer DIR [--add-special-tokens]`: each line of stdin through a Hugging
// Face tokenizer.json, one JSON array of ids per line on stdout (the ids HF `tokenizers` gives).
// With `--chat [--chat-template NAME|FILE] [--add-generation-prompt]`, each line is a JSON
// conversation, rendered with the chat template first (apply_chat_template(tokenize=True)).
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_tokenize_command(CLI::App& app);

}  // namespace qtrain::apps
