// See preprocess_command.h.
#include "apps/preprocess_command.h"

#include <cstdio>

#include "apps/command_config.h"
#include "engine/train/training_data.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string out;
  std::vector<std::string> sets;
};

void run(const Options& o) {
  const auto c = load_command_config(o.config, o.sets);
  const auto written = engine::train::write_preprocessed(c, o.out);
  const char* what = c.rl.empty() ? "samples" : c.rl == "kto" ? "KTO rows" : "preference pairs";
  std::printf("preprocess: %lld %s written to %s\n", static_cast<long long>(written), what, o.out.c_str());
}

}  // namespace

void add_preprocess_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "preprocess",
      "Write the config's datasets as tokenized samples (input_ids, labels), one JSON object per line; with rl, "
      "TRL's tokenized pairs (prompt_ids, chosen_ids, rejected_ids; KTO: prompt_ids, completion_ids, label)");
  cmd->add_option("config", o->config, "run config (YAML, axolotl keys)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "the JSONL file to write")->required();
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
