// See merge_command.h.
#include "apps/merge_command.h"

#include <cstdio>

#include <ATen/ATen.h>

#include "apps/command_config.h"
#include "apps/output_folder.h"
#include "engine/config/run_config.h"
#include "engine/data/run_tokenizer_files.h"
#include "engine/io/companion_files.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/model/merged_weights.h"
#include "engine/train/run_vocabulary.h"

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
  using namespace engine;
  const auto c = load_command_config(o.config, o.sets);
  check_output_folder("merge", o.out, {{"base_model", c.base_model}, {"--adapter", o.adapter}}, o.overwrite);
  const auto out_dtype = o.dtype == "fp32" ? at::kFloat : at::kBFloat16;
  const auto folder = io::HfFolder::open(c.base_model);
  // The merge uses the base's float weights (a pre-quantized base is dequantized), in float32.
  // See Note [Merged tensors] (engine/model/merged_weights.cpp).
  auto lm = model::CausalLM::load(folder, model::LoadOptions{});
  // The config's new tokens size the model as training did (engine/train/run_vocabulary.h).
  const int64_t base_rows = lm.config().vocab_size;
  const auto vocabulary = train::fit_run_vocabulary(lm, c);
  if (!vocabulary.log_line.empty()) std::fprintf(stderr, "merge: %s\n", vocabulary.log_line.c_str());
  model::attach_lora(lm, io::load_peft_adapter(o.adapter), o.adapter);
  const auto tensors = model::merged_tensors(lm, folder, out_dtype);
  auto json = folder.config();
  json.erase("quantization_config");
  if (model::merge_unties_embeddings(lm)) {
    json["tie_word_embeddings"] = false;
    if (json.contains("text_config") && json["text_config"].is_object())
      json["text_config"]["tie_word_embeddings"] = false;
    std::fprintf(stderr,
                 "merge: the adapter trains the tied embeddings or head in full (modules_to_save): both are "
                 "written, lm_head.weight apart, with tie_word_embeddings: false\n");
  }
  if (lm.config().vocab_size != base_rows) {
    // Gemma 3's and 4's multimodal folders keep the decoder's vocab_size in text_config.
    const bool nested = json.contains("text_config") && json["text_config"].is_object();
    (nested ? json["text_config"] : json)["vocab_size"] = lm.config().vocab_size;
  }
  json["dtype"] = o.dtype == "fp32" ? "float32" : "bfloat16";
  io::save_hf_folder(o.out, json, tensors);
  // The tokenizer, chat template and generation config travel with the weights, the tokenizer
  // with the tokens the run added (the ids the grown embeddings were trained with).
  const auto companions = io::copy_companion_files(c.base_model, o.out);
  const bool tokens_written = vocabulary.tokenizer && data::write_run_tokens(o.out, c, *vocabulary.tokenizer);
  if (!companions.empty()) {
    std::string names;
    for (const auto& n : companions) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr,
                 "merge: copied %s from the base%s\n",
                 names.c_str(),
                 tokens_written ? ", the tokenizer with the run's special_tokens and tokens" : "");
  }
  std::fprintf(stderr,
               "merge: %zu adapted layers folded into %s (%s)\n",
               model::lora_adapters(lm).size(),
               o.out.c_str(),
               json["dtype"].get<std::string>().c_str());
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
