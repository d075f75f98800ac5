// `qtrain quant-report`: quantizes a model-sized weight with every base format qtrain trains on
// and reports what a user chooses between: error, bytes per parameter, quantize and dequantize
// speed. It is the demo until the trainer lands.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_quant_report_command(CLI::App& app);

}  // namespace qtrain::apps
