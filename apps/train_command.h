// `qtrain train CONFIG.yaml [--set key=value ...]`: the main job. See engine/train/trainer.h.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

// `exit_code` receives 130 when the run was interrupted by a signal (after its checkpoint).
void add_train_command(CLI::App& app, int& exit_code);

}  // namespace qtrain::apps
