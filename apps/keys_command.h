// `qtrain keys`: the run config's keys, their types, defaults and meanings, as docs/CONFIG.md's key
// tables show them (Note [Run config table] in engine/config/run_config_table.h).
#pragma once

#include <CLI/CLI.hpp>

namespace qtrain::apps {

void add_keys_command(CLI::App& app);

}  // namespace qtrain::apps
