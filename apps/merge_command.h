// `qtrain merge CONFIG.yaml --adapter DIR --out DIR [--dtype bf16|fp32]`: folds a LoRA adapter
// into the base model's float weights (W + scaling * B A) and writes a plain Hugging Face folder
// that transformers loads without peft.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_merge_command(CLI::App& app);

}  // namespace qtrain::apps
