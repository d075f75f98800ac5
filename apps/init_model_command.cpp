// See init_model_command.h.
#include "apps/init_model_command.h"

#include <cstdio>

#include "apps/output_folder.h"
#include "engine/model/init_model.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string arch = "llama";
  std::string preset = "tiny";
  std::string out;
  uint64_t seed = 0;
  std::string dtype = "fp32";
  int64_t layers = 0;  // 0: the preset's
  bool overwrite = false;
};

void run(const Options& o) {
  using namespace engine::model;
  check_output_folder("init-model", o.out, {}, o.overwrite);
  auto config = preset_config(architecture_from_name(o.arch), o.preset);
  if (o.layers > 0) config = first_layers(config, o.layers);
  const auto dtype = o.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  std::fprintf(stderr,
               "init-model: %s %s (%lld layers, hidden %lld, vocab %lld), seed %llu -> %s\n",
               o.arch.c_str(),
               o.preset.c_str(),
               static_cast<long long>(config.num_layers),
               static_cast<long long>(config.hidden_size),
               static_cast<long long>(config.vocab_size),
               static_cast<unsigned long long>(o.seed),
               o.out.c_str());
  write_random_model(o.out, config, o.seed, dtype);
  std::printf("%s\n", o.out.c_str());
}

}  // namespace

void add_init_model_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("init-model", "Write a random Hugging Face model folder (config.json + safetensors)");
  cmd->add_option("--arch", o->arch, "llama, mistral, qwen2, qwen3, gemma2, gemma3 or gemma4")->capture_default_str();
  cmd->add_option("--preset",
                  o->preset,
                  "tiny, tiny-moe (gemma4, qwen3_moe, mixtral), demo, small, llama3.2-1b, llama3-8b, gemma2-2b, "
                  "gemma3-1b or gemma4-26b-a4b")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "output folder (new, or empty)")->required();
  cmd->add_flag("--overwrite", o->overwrite, "write into a --out folder that already holds files");
  cmd->add_option("--seed", o->seed, "random seed of the weights (0 or more)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "keep only the preset's first N layers (default: all)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 14));
  cmd->add_option("--dtype", o->dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
