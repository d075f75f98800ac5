// `qtrain export-gguf CONFIG [--adapter DIR] [--adapter-only] --out FILE.gguf [--type
// f16|bf16|q8_0|f32]`: the merged model (or the adapter alone, a GGUF LoRA file) for llama.cpp,
// Ollama and LM Studio, written by qtrain itself (no llama.cpp build). See docs/GGUF.md.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_export_gguf_command(CLI::App& app);

}  // namespace qtrain::apps
