// See quantize_command.h.
#include "apps/quantize_command.h"

#include <cstdio>

#include <ATen/ATen.h>

#include "apps/command_config.h"
#include "apps/output_folder.h"
#include "engine/train/model_folders.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string out;
  bool overwrite = false;
  std::vector<std::string> sets;
};

void run(const Options& o) {
  const auto c = load_command_config(o.config, o.sets);
  TORCH_CHECK(c.load_in_4bit || c.load_in_8bit,
              o.config,
              ": quantize needs load_in_4bit: true or load_in_8bit: true in the config (or --set load_in_4bit=true)");
  check_output_folder("quantize", o.out, {{"base_model", c.base_model}}, o.overwrite);
  engine::train::write_quantized_folder(c, o.out, stderr);
  std::printf("%s\n", o.out.c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("quantize", "Write the config's base model as a bitsandbytes pre-quantized HF folder");
  cmd->add_option("config", o->config, "run config (YAML, axolotl keys)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "output folder (new, or empty)")->required();
  cmd->add_flag("--overwrite", o->overwrite, "write into a --out folder that already holds files");
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
