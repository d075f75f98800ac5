// See merge_command.h.
#include "apps/merge_command.h"

#include <cstdio>
#include <map>

#include <ATen/ATen.h>

#include "apps/command_config.h"
#include "apps/output_folder.h"
#include "engine/config/run_config.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"

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
  auto lm = model::CausalLM::load(folder, model::LoadOptions{});
  model::attach_lora(lm, io::load_peft_adapter(o.adapter), o.adapter);
  std::map<std::string, at::Tensor> merged;
  for (const auto& layer : lm.layers()) {
    TORCH_CHECK(!layer.moe || (!layer.moe->experts.gate_up_lora && !layer.moe->experts.down_lora),
                o.adapter,
                ": the adapter has LoRA on the experts of ",
                layer.moe ? layer.moe->experts.name : "",
                " (target_parameters); merging expert LoRA is not supported yet: load the base and the adapter "
                "with peft and call merge_and_unload() instead");
    for (const auto* l : layer.linears()) {
      const auto w = l->dense_weight(at::kFloat);
      merged[l->name + ".weight"] = (l->lora ? lora::lora_merged_weight(w, *l->lora) : w).to(out_dtype);
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& name : folder.tensor_names()) {
    const auto module = name.substr(0, name.rfind('.'));
    if (merged.count(name)) {
      tensors.emplace_back(name, merged.at(name));
    } else if (merged.count(module + ".weight")) {
      continue;  // bitsandbytes state of a quantized weight (absmax, quant_map, SCB, ...)
    } else {
      const auto t = folder.tensor(name);
      tensors.emplace_back(name, at::isFloatingType(t.scalar_type()) ? t.to(out_dtype) : t);
    }
  }
  auto json = folder.config();
  json.erase("quantization_config");
  json["dtype"] = o.dtype == "fp32" ? "float32" : "bfloat16";
  io::save_hf_folder(o.out, json, tensors);
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
