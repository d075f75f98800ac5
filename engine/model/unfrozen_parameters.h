// axolotl's unfrozen_parameters: base parameters named by regular expressions to train in full.
// See Note [Unfrozen parameters].
//
// Note [Unfrozen parameters]
// axolotl (utils/freeze.py, LayerNamePattern) reads each entry as a regular expression in which a
// '.' is literal unless '+' follows it, matched from the start of a parameter's name (re.match),
// optionally ending in a row range "[a:b]", "[a:]", "[:b]" or "[a]" whose complement it keeps
// frozen by zeroing those rows of the gradient. It matches the names of the model it holds, which
// under an adapter are peft's ("base_model.model.model.layers.0..."): patterns written for the
// base ("^model.embed_tokens.weight", "^lm_head.*", as its examples write them) then match nothing,
// and axolotl freezes every parameter, LoRA included. qtrain matches each pattern against the
// base's names (transformers', e.g. "model.embed_tokens.weight") and against peft's, and keeps
// the adapters trained. What matches must be a parameter qtrain trains in full: the token
// embeddings, the output head or a norm, which train as modules_to_save do (Note [Modules
// trained in full]: a float32 copy, saved in the adapter under the module's path in
// modules_to_save, which peft then loads), a row range zeroing the other rows' gradient as
// axolotl's hook does (on the embeddings and head only). A linear weight of the base (quantized,
// or held for streaming), a bias (peft's format saves trained biases only all together, its
// bias="all") and a router (trained through its LoRA) are refused by name; a pattern that
// matches nothing is reported, as axolotl's "all parameters are frozen" would not say which.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/lora/lora_config.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// Rows [first, last) of a parameter's first dimension.
using RowRange = std::pair<int64_t, int64_t>;

struct Unfrozen {
  std::vector<std::string> modules_to_save;  // "embed_tokens", "lm_head", norms' module paths
  // Per trained module ("embed_tokens", "lm_head"): the rows that train; empty: all.
  std::vector<RowRange> embed_rows, head_rows;
  std::vector<std::string> unmatched;  // the patterns that name no parameter
};

// What `patterns` unfreeze among `parameter_names` (the base's, as transformers names them) of
// `model`; `where` names the config in errors.
Unfrozen unfrozen_parameters(const CausalLM& model,
                             const std::vector<std::string>& parameter_names,
                             const std::vector<std::string>& patterns,
                             const std::string& where);

// Zeroes the gradient of the rows of `weight` (a trained copy) outside `rows`, on every backward.
void train_rows_only(const at::Tensor& weight, const std::vector<RowRange>& rows);

}  // namespace qtrain::engine::model
