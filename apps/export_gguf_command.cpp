// See export_gguf_command.h.
#include "apps/export_gguf_command.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include <c10/util/Exception.h>

#include "apps/command_config.h"
#include "engine/train/gguf_export.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string adapter;
  std::string out;
  std::string type = "f16";
  std::string pre;
  bool adapter_only = false;
  bool overwrite = false;
  std::vector<std::string> sets;
};

void run(const Options& o) {
  const auto c = load_command_config(o.config, o.sets);
  TORCH_CHECK(o.overwrite || !std::filesystem::exists(o.out),
              "qtrain export-gguf: --out ",
              o.out,
              " exists; give a new file, or pass --overwrite to replace it");
  const std::map<std::string, ops::GgmlType> types = {{"f32", ops::GgmlType::f32},
                                                      {"f16", ops::GgmlType::f16},
                                                      {"bf16", ops::GgmlType::bf16},
                                                      {"q8_0", ops::GgmlType::q8_0}};
  if (o.adapter_only) {
    engine::train::write_gguf_adapter(c, o.adapter, o.out, types.at(o.type), stderr);
  } else {
    engine::train::write_gguf(c, o.adapter, o.out, types.at(o.type), o.pre, stderr);
  }
  std::printf("%s\n", o.out.c_str());
}

}  // namespace

void add_export_gguf_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("export-gguf", "Write the merged model (base + adapter) as a GGUF file for llama.cpp");
  cmd->add_option("config", o->config, "run config naming base_model")->required()->check(CLI::ExistingFile);
  cmd->add_option(
      "--adapter", o->adapter, "PEFT adapter folder (default: the config's lora_model_dir; none: the base)");
  cmd->add_option("--out", o->out, "the .gguf file to write")->required();
  cmd->add_option("--type", o->type, "tensor type of the matrices (norms and biases stay f32)")
      ->check(CLI::IsMember({"f16", "bf16", "q8_0", "f32"}))
      ->capture_default_str();
  cmd->add_option("--pre", o->pre, "tokenizer.ggml.pre, where qtrain does not know the tokenizer's (llama.cpp's name)");
  cmd->add_flag("--adapter-only",
                o->adapter_only,
                "write the adapter alone as a GGUF LoRA file (llama-cli --lora, Ollama's ADAPTER)");
  cmd->add_flag("--overwrite", o->overwrite, "replace an existing --out file");
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
