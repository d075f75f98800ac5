// What a run config means for the model: where it computes, in which dtype, how its base is
// quantized, and which LoRA adapters it gets. Shared by every command that loads a model.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/config/run_config.h"
#include "engine/lora/lora_config.h"
#include "engine/model/causal_lm.h"
#include "engine/schedule/execution_plan.h"

namespace qtrain::engine::train {

// "auto": CUDA when a device is present, else the CPU; "cpu", "cuda", "cuda:N".
at::Device resolve_device(const std::string& device);
// bf16 / fp16 / float32 from the config; bf16 "auto" means bf16 on CUDA, float32 on the CPU.
at::ScalarType compute_dtype(const config::RunConfig& config, const at::Device& device);
model::QuantSpec quant_spec(const config::RunConfig& config);
// How the base's linear weights are stored, as the run log states it: the run config's
// quantization for a float checkpoint ("nf4", "int8", "not quantized"), or the checkpoint's own
// for one saved quantized by bitsandbytes, which wins over the run config as in transformers;
// where the two differ the note says so, naming both.
std::string base_quantization_note(const nlohmann::json& config_json,
                                   const std::string& where,
                                   const config::RunConfig& config);
model::LoadOptions load_options(const config::RunConfig& config);
// The run's LoRA setup for a base of `model`'s architecture: the config's keys as peft 0.21.2
// applies them there (Note [peft's MoE target conversion] in engine/model/peft_targets.h).
lora::LoraConfig lora_config(const config::RunConfig& config, const model::ModelConfig& model);
// gradient_checkpointing as the scheduler's policy (its k is gradient_checkpointing_every_k).
schedule::CheckpointPolicy checkpoint_policy(const config::RunConfig& config);

}  // namespace qtrain::engine::train
