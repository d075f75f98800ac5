// The model a command evaluates or generates with: one way for `qtrain eval`, `generate` and
// `chat` to set up the base, the run's vocabulary and the adapter from a run config.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/config/run_config.h"
#include "engine/data/text_tokenizer.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::train {

struct RunModel {
  model::CausalLM lm;
  // The run's tokenizer (base_model's, with the config's special_tokens and tokens); null where
  // base_model has none (pre-tokenized data only).
  std::unique_ptr<data::TextTokenizer> tokenizer;
  std::filesystem::path adapter;  // attached; empty: none
};

// base_model loaded as `c` says (device, compute dtype, quantization of the base, experts),
// sized to the run's vocabulary (engine/train/run_vocabulary.h), with `adapter` attached (empty:
// the config's lora_model_dir; both empty: the base alone). What it did goes to `log`, each line
// led by `command` ("eval: ...").
RunModel load_run_model(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::string& command,
                        std::FILE* log);

}  // namespace qtrain::engine::train
