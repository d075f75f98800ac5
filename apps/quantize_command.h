// `qtrain quantize CONFIG.yaml --out DIR`: writes the config's base model, quantized as the
// config says (load_in_4bit / load_in_8bit), as a bitsandbytes pre-quantized Hugging Face folder
// that transformers + bitsandbytes load, and that qtrain loads back without quantizing again.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_quantize_command(CLI::App& app);

}  // namespace qtrain::apps
