// See quantize_command.h.
#include "apps/quantize_command.h"

#include <cstdio>
#include <set>

#include <ATen/ATen.h>

#include "apps/command_config.h"
#include "apps/output_folder.h"
#include "engine/io/bnb_checkpoint.h"
#include "engine/io/companion_files.h"
#include "engine/io/hf_folder.h"
#include "engine/train/model_setup.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string out;
  bool overwrite = false;
  std::vector<std::string> sets;
};

void run(const Options& o) {
  using namespace engine;
  auto c = load_command_config(o.config, o.sets);
  TORCH_CHECK(c.load_in_4bit || c.load_in_8bit,
              o.config,
              ": quantize needs load_in_4bit: true or load_in_8bit: true in the config (or --set load_in_4bit=true)");
  check_output_folder("quantize", o.out, {{"base_model", c.base_model}}, o.overwrite);
  c.device = "cpu";  // the file is written from host memory; quantization is the same bytes on any device
  const auto folder = io::HfFolder::open(c.base_model);
  const auto options = train::load_options(c);
  std::fprintf(stderr,
               "quantize: %s -> %s (%s)\n",
               c.base_model.c_str(),
               o.out.c_str(),
               c.load_in_4bit ? c.bnb_4bit_quant_type.c_str() : "int8");
  const auto lm = model::CausalLM::load(folder, options);

  // Quantized linears in bitsandbytes' layout; every other tensor exactly as the source has it.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::set<std::string> written;
  for (const auto& layer : lm.layers()) {
    for (const auto* l : layer.linears()) {
      const auto name = l->name + ".weight";
      auto part = c.load_in_4bit ? io::bnb_4bit_tensors(name, std::get<ops::Packed4bit>(l->weight))
                                 : io::bnb_int8_tensors(name, std::get<ops::Int8Weight>(l->weight));
      for (auto& t : part) written.insert(t.first);
      tensors.insert(tensors.end(), part.begin(), part.end());
    }
  }
  for (const auto& name : folder.tensor_names()) {
    if (!written.count(name)) tensors.emplace_back(name, folder.tensor(name));
  }
  io::BnbQuantization q;
  q.bits = c.load_in_4bit ? 4 : 8;
  q.quant_type = options.quant.kind == model::QuantSpec::Kind::fp4 ? ops::QuantType::fp4 : ops::QuantType::nf4;
  q.double_quant = c.bnb_4bit_use_double_quant;
  q.compute_dtype = options.dtype;
  q.llm_int8_threshold = c.llm_int8_threshold;
  auto json = folder.config();
  json["quantization_config"] = io::bnb_quantization_config(q);
  io::save_hf_folder(o.out, json, tensors);
  // Tokenizer and generation files travel with the weights.
  io::copy_companion_files(c.base_model, o.out);
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
