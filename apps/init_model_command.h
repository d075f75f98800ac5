// `qtrain init-model`: writes a random Hugging Face model folder of a supported architecture
// (the demo's model, test models, benchmark stand-ins).
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_init_model_command(CLI::App& app);

}  // namespace qtrain::apps
