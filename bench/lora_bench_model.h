// The model the CPU training-step benchmarks measure against transformers + peft +
// bitsandbytes: a Hugging Face folder with its linear weights in NF4 with double quantization
// (or unquantized), float32 compute, and a fresh LoRA adapter of rank r, alpha 2r, on every
// linear layer, as peft's LoraConfig(r, lora_alpha=2r, target_modules="all-linear") makes it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/io/hf_folder.h"
#include "engine/lora/lora_config.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"

namespace qtrain::bench {

inline engine::model::CausalLM lora_bench_model(const std::string& model_dir, int64_t rank, bool nf4) {
  using namespace qtrain::engine;
  model::LoadOptions options;
  if (nf4) {
    options.quant.kind = model::QuantSpec::Kind::nf4;
    options.quant.double_quant = true;
  }
  auto lm = model::CausalLM::load(io::HfFolder::open(model_dir), options);
  lora::LoraConfig lc;
  lc.r = rank;
  lc.alpha = 2.0 * static_cast<double>(rank);
  lc.target_all_linear = true;
  model::attach_new_lora(lm, lc, 0);
  return lm;
}

}  // namespace qtrain::bench
