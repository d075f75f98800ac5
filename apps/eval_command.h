// `qtrain eval CONFIG.yaml [--data FILE.jsonl] [--adapter DIR] [--set key=value ...]`: the loss
// of a (quantized) base model, with or without an adapter, on pre-tokenized data. Its last
// stdout line is one JSON object {"loss", "tokens", "perplexity"}: what a user compares between a
// base and a tuned model, and what parity checks drive.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_eval_command(CLI::App& app);

}  // namespace qtrain::apps
