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
#include "engine/schedule/streamed_weights.h"

namespace qtrain::engine::train {

struct RunModel {
  // On the heap: the residency holds it by reference, so it must not move with the RunModel.
  std::unique_ptr<model::CausalLM> lm;
  // The run's tokenizer (base_model's, with the config's special_tokens and tokens); null where
  // base_model has none (pre-tokenized data only).
  std::unique_ptr<data::TextTokenizer> tokenizer;
  std::filesystem::path adapter;  // attached; empty: none
  // The layers streamed from host memory, as the config's offload_layers (or, on CUDA, the plan
  // for gpu_memory_limit) says, for the LayerScheduler; null when every layer is resident.
  std::shared_ptr<schedule::StreamedWeights> residency;
  // The embedding rows base_model has; lm's differ where the run's tokens grew them.
  int64_t base_vocab_size = 0;
};

// base_model loaded as `c` says (device, compute dtype, quantization of the base, experts, and
// the layers training would stream: the device plan of engine/train/device_plan.h, so a model
// that trains on a card runs there too; in one process, so shard_base does not apply), sized to
// the run's vocabulary (engine/train/run_vocabulary.h), with `adapter` attached (empty:
// the config's lora_model_dir; both empty: the base alone). What it did goes to `log`, each line
// led by `command` ("eval: ...").
RunModel load_run_model(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::string& command,
                        std::FILE* log);
// The same with the base loaded by `options` as given (merge: float32 on the CPU, a quantized
// base dequantized), every layer resident.
RunModel load_run_model(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::string& command,
                        std::FILE* log,
                        const model::LoadOptions& options);

}  // namespace qtrain::engine::train
