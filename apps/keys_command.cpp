// See keys_command.h.
#include "apps/keys_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "engine/config/config_keys.h"
#include "engine/config/run_config_table.h"

namespace qtrain::apps {

void add_keys_command(CLI::App& app) {
  auto key = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("keys",
                                 "Print the run config's keys (type, default, source, meaning) as markdown tables, "
                                 "one per docs/CONFIG.md section");
  cmd->add_option("key", *key, "print only this key's row");
  cmd->callback([key] {
    using namespace engine::config;
    if (!key->empty()) {
      for (const auto& k : run_config_table()) {
        if (k.name != *key) continue;
        std::printf("%s", run_config_key_table(k.section, k.name).c_str());
        return;
      }
      throw CLI::ValidationError("key", "'" + *key + "' is not a run config key (qtrain keys lists them)");
    }
    for (const auto& section : run_config_sections()) {
      std::printf("### %s\n\n%s\n", section.c_str(), run_config_key_table(section).c_str());
    }
    std::printf("### axolotl keys qtrain refuses\n\n%s\nInside a `datasets` entry:\n\n%s\n",
                refused_keys_table(refused_keys()).c_str(),
                refused_keys_table(refused_dataset_keys()).c_str());
    std::printf("### axolotl settings qtrain accepts and ignores\n\n%s", ignored_keys_table().c_str());
  });
}

}  // namespace qtrain::apps
