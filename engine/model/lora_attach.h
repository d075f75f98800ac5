// Puts LoRA adapters on a model's linear layers, MoE routers and experts: fresh ones (PEFT's
// initialisation) for the layers and parameters a LoraConfig targets, or the tensors of a PEFT
// adapter folder; and collects them back by PEFT module path for saving.
//
// Note [Expert LoRA module names]
// PEFT wraps each targeted parameter of a module in a ParamWrapper; two targeted parameters of
// one module nest, the parameter registered first (gate_up_proj) innermost. So with both experts'
// parameters targeted, gate_up_proj's adapter is saved under "<layer>.mlp.experts.base_layer" and
// down_proj's under "<layer>.mlp.experts"; with only one targeted, it is "<layer>.mlp.experts".
// Gemma 4's experts have no mlp. level: "<layer>.experts.base_layer" and "<layer>.experts", and
// target_parameters experts.gate_up_proj / experts.down_proj. Their A and B have PEFT's stacked shapes (Note [Expert
// LoRA layout]).
#pragma once

#include <map>
#include <string>

#include "engine/io/peft_adapter.h"
#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// Fresh adapters on every linear the config targets (with target_all_linear every one but
// lm_head, Gemma 4's router.proj included), on the routers whose weight its target_parameters
// name (Note [Router LoRA] in engine/model/moe_block.h), and on the experts' gate_up_proj /
// down_proj it names. The config is applied as given: a run's goes through peft_targets first
// (engine/model/peft_targets.h). A is drawn from one CPU generator seeded with `seed`, layer by
// layer in module order (the router, then the experts, after the linears), so a seed reproduces
// the adapter. The modules its modules_to_save names get trainable copies (saved_modules.h). Returns the number of
// adapted layers; zero is an error naming the targets and the model's module names.
int64_t attach_new_lora(CausalLM& model, const lora::LoraConfig& config, uint64_t seed);

// The adapter's tensors on the modules they name, and its modules trained in full; every module
// must exist in the model with matching shapes (expert adapters: see Note [Expert LoRA module
// names]).
void attach_lora(CausalLM& model, const io::LoadedAdapter& adapter, const std::string& source);

// Every adapter of the model, by PEFT module path (e.g. "model.layers.0.self_attn.q_proj",
// "model.layers.0.mlp.gate", "model.layers.0.mlp.experts.base_layer"); expert adapters hold the
// stacked tensors.
std::map<std::string, lora::LoraAdapter> lora_adapters(const CausalLM& model);

}  // namespace qtrain::engine::model
