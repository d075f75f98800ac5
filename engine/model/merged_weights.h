// The weights of a model with its LoRA folded in, named and shaped as in the base folder it was
// loaded from, for `qtrain merge`: a plain Hugging Face folder that transformers loads without
// peft. See Note [Merged tensors].
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/io/hf_folder.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// Every tensor of `folder` in its order, in `dtype` where it is a float: each linear and expert
// weight as W + scaling * B @ A (computed in float32 from the dequantized base, rounded once),
// other tensors as stored. A pre-quantized base's bitsandbytes state is dropped with its weight.
std::vector<std::pair<std::string, at::Tensor>> merged_tensors(const CausalLM& lm,
                                                               const io::HfFolder& folder,
                                                               at::ScalarType dtype);

}  // namespace qtrain::engine::model
