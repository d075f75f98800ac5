// See command_config.h.
#include "apps/command_config.h"

#include "engine/dist/rank_log.h"

namespace qtrain::apps {

engine::config::RunConfig load_command_config(const std::string& file, const std::vector<std::string>& sets) {
  auto config = engine::config::load_run_config(file, sets);
  if (const std::string note = engine::config::ignored_keys_note(config); !note.empty()) {
    engine::dist::log_warning(file + ": " + note);
  }
  for (const std::string& warning : config.warnings) engine::dist::log_warning(warning);
  return config;
}

}  // namespace qtrain::apps
