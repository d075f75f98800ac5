// `qtrain plan CONFIG.yaml [--gpu-memory 24GiB] [--h2d-bandwidth 25GB/s] [--set key=value ...]`:
// where a run's GPU memory goes and how many layers it offloads, from the config and the base
// model's config.json alone (no weights are read, no GPU is needed). Prints the plan's table;
// exits with 1 when the run does not fit, after the table and what to change.
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

// `exit_code` receives 1 when the plan does not fit the budget.
void add_plan_command(CLI::App& app, int& exit_code);

}  // namespace qtrain::apps
