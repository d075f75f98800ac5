// PEFT LoRA adapter folders: adapter_config.json + adapter_model.safetensors, as peft 0.21's
// PeftModel.save_pretrained writes them for a causal LM.
//
// Adapters are qtrain's output, and users take them to PEFT, vLLM, axolotl or a merge script, so
// the writer produces exactly what PEFT writes (every config field PEFT 0.21 writes, the same
// tensor keys) and the reader accepts what PEFT writes for plain LoRA, per-module ranks and alphas
// (rank_pattern, alpha_pattern), LoRA on MoE experts and routers, the embeddings and head trained in
// full (modules_to_save) and DoRA's magnitudes (use_dora, "<module>.lora_magnitude_vector")
// included. Anything that would change the adapter's meaning and that qtrain does not implement
// (LoRA biases, ...) is refused by name rather than dropped.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>

#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"

namespace qtrain::engine::io {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
// PeftModel's "base_model." + LoraModel's "model."; the Hugging Face module path follows.
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";
// The peft release whose adapter format the writer reproduces (and that the interop test loads
// it with); written as "peft_version".
inline constexpr const char* kPeftFormatVersion = "0.21.2";

// Writes `dir`/adapter_config.json and `dir`/adapter_model.safetensors. `adapters` maps HF
// module paths ("model.layers.0.self_attn.q_proj") to their adapters; each must be targeted by
// `config` and have its module's rank and scaling (LoraConfig::for_module: rank_pattern and
// alpha_pattern, matched for an expert adapter against its parameter's path). Tensors are saved in `save_dtype` (fp32,
// bf16 or fp16) under "base_model.model.<module>.lora_A.weight" / ".lora_B.weight".
// `saved_modules` (module path -> weight) are the modules trained in full, which config's
// modules_to_save must name; each is saved as "base_model.model.<module>.weight", as PEFT saves a
// ModulesToSaveWrapper's copy.
// target_modules is written as the sorted distinct last components of the adapted modules
// ("k_proj", "q_proj", ...): PEFT then attaches LoRA to every module with such a name, so
// `adapters` should cover all of them, as the trainer's do.
//
// Atomic: both files are written and flushed in "<dir>.tmp" beside `dir`, which then takes
// `dir`'s place in one rename (an exchange when `dir` already holds an adapter), so a crash
// leaves the old adapter or the new one, never half of one. Because the folder is replaced as a
// whole, an existing `dir` may hold only adapter files (adapter_config.json,
// adapter_model.safetensors, adapter_model.bin, README.md); anything else is an error, never
// deleted.
// `AdapterFolder::shared` writes the two adapter files into `dir` beside whatever else it holds
// (a run's output_dir with its checkpoints and logs), replacing each file atomically.
enum class AdapterFolder { own, shared };
void save_peft_adapter(const std::filesystem::path& dir,
                       const lora::LoraConfig& config,
                       const std::map<std::string, lora::LoraAdapter>& adapters,
                       const std::string& base_model_name_or_path,
                       at::ScalarType save_dtype = at::kFloat,
                       AdapterFolder folder = AdapterFolder::own,
                       const std::map<std::string, at::Tensor>& saved_modules = {});

struct LoadedAdapter {
  lora::LoraConfig config;
  // HF module path -> adapter with fp32 CPU weights that require grad (bf16/fp16 files are
  // upcast, as PEFT's autocast_adapter_dtype does), scaling and dropout from the config.
  std::map<std::string, lora::LoraAdapter> adapters;
  // The modules trained in full (modules_to_save): module path ("model.embed_tokens", "lm_head")
  // -> its float32 CPU weight (Note [Modules trained in full] in engine/model/saved_modules.h).
  std::map<std::string, at::Tensor> saved_modules;
  std::string base_model;  // base_model_name_or_path; empty when null
};

// Reads and validates a PEFT LoRA adapter folder; every error names the file, the key or tensor
// and the way out.
LoadedAdapter load_peft_adapter(const std::filesystem::path& dir);

}  // namespace qtrain::engine::io
