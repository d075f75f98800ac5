// Which modules and parameters peft 0.21.2 adapts for a LoRA config on a given architecture,
// written out as a config that means the same without the rewrite. See Note [peft's MoE target
// conversion].
//
// Note [peft's MoE target conversion]
// On transformers 5, Qwen3-MoE's and Mixtral's experts are 3-D parameters and their router a
// module holding a weight; on transformers 4 all of them were nn.Linear. So that adapters written
// for either still load, peft (utils/transformers_weight_conversion.py, _convert_peft_config_moe)
// rewrites, whenever it injects an adapter into these families, the target_modules that name the
// old linears into target_parameters:
//     gate -> gate.weight    gate_proj, up_proj (Mixtral: w1, w3) -> gate_up_proj
//     down_proj (Mixtral: w2) -> down_proj
// an entry naming one when it equals it or ends with "." + it. gate_proj without up_proj (or the
// reverse) is an error, the two being fused; both double gate_up_proj's rank and alpha:
// rank_pattern and alpha_pattern gain ".*\.gate_up_proj" -> 2 r, 2 alpha. "all-linear" first
// becomes the last components of every nn.Linear but lm_head plus those four old names, so it
// adapts the attention's q/k/v/o_proj as modules and, as parameters, every router and both
// expert parameters; a dense layer's MLP (Qwen3-MoE's mlp_only_layers) gets no adapter, its
// gate_proj/up_proj/down_proj names having become the experts'. A regular-expression
// target_modules is left as written here (peft narrows it to the last components of what it
// matches, which can widen it to more layers; those layers' adapters then start at B = 0).
// Other families are unchanged: their all-linear, Gemma 4's router.proj included, is every linear
// but lm_head, as LoraConfig::targets reads it.
#pragma once

#include "engine/lora/lora_config.h"
#include "engine/model/model_config.h"

namespace qtrain::engine::model {

// `config` as peft rewrites it for `model` (above): what a new adapter is trained with and saved
// under, so that peft, loading it, rewrites nothing. `where` names the config for errors.
lora::LoraConfig peft_targets(lora::LoraConfig config, const ModelConfig& model, const std::string& where);

}  // namespace qtrain::engine::model
