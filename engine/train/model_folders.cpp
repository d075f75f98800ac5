// See model_folders.h.
#include "engine/train/model_folders.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "engine/data/run_tokenizer_files.h"
#include "engine/io/bnb_checkpoint.h"
#include "engine/io/companion_files.h"
#include "engine/io/hf_folder.h"
#include "engine/model/lora_attach.h"
#include "engine/model/merged_weights.h"
#include "engine/train/model_setup.h"
#include "engine/train/run_model.h"

namespace qtrain::engine::train {

void write_merged_folder(const config::RunConfig& c,
                         const std::filesystem::path& adapter,
                         const std::filesystem::path& out,
                         at::ScalarType dtype,
                         std::FILE* log) {
  // The merge uses the base's float weights (a pre-quantized base is dequantized), in float32 on
  // the CPU. See Note [Merged tensors] (engine/model/merged_weights.cpp).
  auto run = load_run_model(c, adapter, "merge", log, model::LoadOptions{});
  const auto& lm = *run.lm;
  const auto folder = io::HfFolder::open(c.base_model);
  const auto tensors = model::merged_tensors(lm, folder, dtype);
  auto json = folder.config();
  json.erase("quantization_config");
  // Gemma 3's and 4's multimodal folders keep the decoder's settings in text_config.
  const bool nested = json.contains("text_config") && json["text_config"].is_object();
  if (model::merge_unties_embeddings(lm)) {
    json["tie_word_embeddings"] = false;
    if (nested) json["text_config"]["tie_word_embeddings"] = false;
    std::fprintf(log,
                 "merge: the adapter trains the tied embeddings or head in full (modules_to_save): both are "
                 "written, lm_head.weight apart, with tie_word_embeddings: false\n");
  }
  if (lm.config().vocab_size != run.base_vocab_size)
    (nested ? json["text_config"] : json)["vocab_size"] = lm.config().vocab_size;
  json["dtype"] = dtype == at::kFloat ? "float32" : "bfloat16";
  io::save_hf_folder(out, json, tensors);
  // The tokenizer, chat template and generation config travel with the weights, the tokenizer
  // with the tokens the run added (the ids the grown embeddings were trained with).
  const auto companions = io::copy_companion_files(c.base_model, out);
  const bool tokens_written = run.tokenizer && data::write_run_tokens(out, c, *run.tokenizer);
  if (!companions.empty()) {
    std::string names;
    for (const auto& n : companions) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(log,
                 "merge: copied %s from the base%s\n",
                 names.c_str(),
                 tokens_written ? ", the tokenizer with the run's special_tokens and tokens" : "");
  }
  std::fprintf(log,
               "merge: %zu adapted layers folded into %s (%s)\n",
               model::lora_adapters(lm).size(),
               out.c_str(),
               json["dtype"].get<std::string>().c_str());
}

void write_quantized_folder(const config::RunConfig& run_config, const std::filesystem::path& out, std::FILE* log) {
  TORCH_CHECK(run_config.load_in_4bit || run_config.load_in_8bit,
              "quantize needs load_in_4bit: true or load_in_8bit: true in the config (or --set load_in_4bit=true)");
  auto c = run_config;
  c.device = "cpu";  // the file is written from host memory; quantization is the same bytes on any device
  const auto folder = io::HfFolder::open(c.base_model);
  const auto options = load_options(c);
  std::fprintf(log,
               "quantize: %s -> %s (%s)\n",
               c.base_model.c_str(),
               out.c_str(),
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
  io::save_hf_folder(out, json, tensors);
  io::copy_companion_files(c.base_model, out);
}

}  // namespace qtrain::engine::train
