// `qtrain generate CONFIG [--adapter DIR] [--prompt TEXT ... | --prompts FILE.jsonl] [--chat]
// [--out FILE.jsonl] [decoding options]`: completions of prompts by the model as trained (the
// quantized base with the adapter unmerged), streamed to the terminal or written as JSONL with
// the prompt, the completion, its token ids and why it stopped. See docs/GENERATE.md.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_generate_command(CLI::App& app);

}  // namespace qtrain::apps
