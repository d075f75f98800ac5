// The run config a command works from: the YAML file with its --set overrides, read strictly
// (engine/config/run_config.h), and the one line that names the axolotl settings it accepted and
// ignored, printed to stderr so that a user sees what qtrain did not act on.
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace qtrain::apps {

engine::config::RunConfig load_command_config(const std::string& file, const std::vector<std::string>& sets);

}  // namespace qtrain::apps
