// The modules a LoRA run trains in full beside its adapters: PEFT's modules_to_save, for the token
// embeddings, the output head and the norms. See Note [Modules trained in full].
//
// Note [Modules trained in full]
// peft's modules_to_save wraps each module it names in a ModulesToSaveWrapper: a trainable copy of
// the module, made when the adapter is created, that the forward uses in place of the original,
// which stays frozen. The copy is saved beside the LoRA tensors as
// "base_model.model.<module path>.weight" (e.g. base_model.model.model.embed_tokens.weight,
// base_model.model.lm_head.weight), and adapter_config.json lists the entries, each naming every
// module whose path ends with it (a plain string suffix: "norm" names input_layernorm, q_norm and
// model.norm alike). qtrain trains so the modules people put there, embed_tokens and lm_head (for
// new tokens, or a chat template's new roles), and the norms (also what unfrozen_parameters
// unfreezes among them, listed by path: "model.layers.0.input_layernorm"), whose float32 copies
// take the frozen weights' place in the layers. With tied embeddings peft's default (ensure_weight_tying: false) copies
// each listed module on its own: listing both trains two copies that start equal and drift apart, listing one leaves
// the other the frozen original; qtrain does the same, and its merge writes the two apart (tie_word_embeddings false)
// so that nothing trained is lost. The copies are float32 master weights used in the compute dtype (peft copies the
// module in the model's dtype, bf16 under axolotl's bf16: it then trains bf16 weights), trained by the same optimizer
// as the adapters, with the same learning rate, clipping and weight decay.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "engine/lora/lora_config.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// The PEFT module paths of the embeddings and head (the norms': CausalLM::norm_weights): "<weight prefix>embed_tokens"
// ("model.embed_tokens", or "model.language_model.embed_tokens" in a multimodal folder) and "lm_head".
std::string embed_tokens_module(const ModelConfig& config);
inline constexpr const char* kLmHeadModule = "lm_head";

// Fresh trainable copies of the frozen embeddings, head and norms that `config`'s modules_to_save
// names (those not trained yet); an entry naming none is an error that says what the model's are.
void attach_new_saved_modules(CausalLM& model, const lora::LoraConfig& config);

// The copies an adapter holds (module path -> weight, as io::LoadedAdapter::saved_modules), on
// the model; each must be this model's embeddings, head or a norm, with its shape. `source` names the
// adapter folder in errors.
void attach_saved_modules(CausalLM& model, const std::map<std::string, at::Tensor>& modules, const std::string& source);

// The model's trained copies by module path, for saving.
std::map<std::string, at::Tensor> saved_modules(const CausalLM& model);

}  // namespace qtrain::engine::model
