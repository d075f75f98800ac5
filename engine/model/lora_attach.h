// Puts LoRA adapters on a model's linear layers: fresh ones (PEFT's initialisation) for the
// layers a LoraConfig targets, or the tensors of a PEFT adapter folder; and collects them back
// by Hugging Face module path for saving.
#pragma once

#include <map>
#include <string>

#include "engine/io/peft_adapter.h"
#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// Fresh adapters on every linear the config targets (all seven with target_all_linear). A is
// drawn from one CPU generator seeded with `seed`, layer by layer in module order, so a seed
// reproduces the adapter. Returns the number of adapted layers; zero is an error naming the
// targets and the model's module names.
int64_t attach_new_lora(CausalLM& model, const lora::LoraConfig& config, uint64_t seed);

// The adapter's tensors on the modules they name; every module must exist in the model with
// matching shapes.
void attach_lora(CausalLM& model, const io::LoadedAdapter& adapter, const std::string& source);

// Every adapter of the model, by module path (e.g. "model.layers.0.self_attn.q_proj").
std::map<std::string, lora::LoraAdapter> lora_adapters(const CausalLM& model);

}  // namespace qtrain::engine::model
