// See train_command.h.
#include "apps/train_command.h"

#include <cstdio>

#include "apps/command_config.h"
#include "engine/train/trainer.h"

namespace qtrain::apps {

void add_train_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string config;
    std::vector<std::string> sets;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("train", "Fine-tune LoRA adapters on a (quantized) base model from a YAML config");
  cmd->add_option("config", o->config, "run config (YAML, axolotl keys; see docs/CONFIG.md)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o, &exit_code] {
    const auto config = load_command_config(o->config, o->sets);
    const auto r = engine::train::train(config);
    if (r.lead) {
      std::printf("done: %lld steps (%lld skipped), last loss %.4f, output in %s\n",
                  static_cast<long long>(r.steps),
                  static_cast<long long>(r.skipped_steps),
                  r.last_loss,
                  r.output_dir.c_str());
    }
    if (r.interrupted) exit_code = 130;
  });
}

}  // namespace qtrain::apps
