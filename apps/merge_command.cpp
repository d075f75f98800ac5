// See merge_command.h.
#include "apps/merge_command.h"

#include <cstdio>

#include <ATen/ATen.h>

#include "apps/command_config.h"
#include "apps/output_folder.h"
#include "engine/train/model_folders.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string adapter;
  std::string out;
  std::string dtype = "bf16";
  bool overwrite = false;
  std::vector<std::string> sets;
};

void run(const Options& o) {
  const auto c = load_command_config(o.config, o.sets);
  check_output_folder("merge", o.out, {{"base_model", c.base_model}, {"--adapter", o.adapter}}, o.overwrite);
  engine::train::write_merged_folder(c, o.adapter, o.out, o.dtype == "fp32" ? at::kFloat : at::kBFloat16, stderr);
  std::printf("%s\n", o.out.c_str());
}

}  // namespace

void add_merge_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("merge", "Fold a LoRA adapter into the base weights and write a plain HF folder");
  cmd->add_option("config", o->config, "run config naming base_model")->required()->check(CLI::ExistingFile);
  cmd->add_option("--adapter", o->adapter, "PEFT adapter folder")->required();
  cmd->add_option("--out", o->out, "output folder (new, or empty)")->required();
  cmd->add_flag("--overwrite", o->overwrite, "write into a --out folder that already holds files");
  cmd->add_option("--dtype", o->dtype, "bf16 or fp32")->check(CLI::IsMember({"bf16", "fp32"}))->capture_default_str();
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
