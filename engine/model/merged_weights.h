// The weights of a model with its LoRA folded in, named and shaped as in the base folder it was
// loaded from, for `qtrain merge`: a plain Hugging Face folder that transformers loads without
// peft. See Note [Merged tensors].
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/io/hf_folder.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// Every tensor of `folder` in its order, in `dtype` where it is a float: each linear, router and
// expert weight as W + scaling * B @ A (computed in float32 from the dequantized base, rounded
// once), the embeddings, head and norms trained in full as trained, other tensors as stored. A
// pre-quantized base's bitsandbytes state is dropped with its weight. Where the embeddings are
// tied and one of the two was trained, lm_head.weight follows as a tensor of its own.
std::vector<std::pair<std::string, at::Tensor>> merged_tensors(const CausalLM& lm,
                                                               const io::HfFolder& folder,
                                                               at::ScalarType dtype);

// One tensor of merged_tensors, made when asked: its name, its shape (numpy order), and `make`,
// which computes it (a linear's merged weight from its base and adapter) and returns it in the
// dtype asked for. A writer that makes them one at a time holds one merged weight at a time (the
// experts of sparse layers as stored are the exception: they are merged ahead and held).
// The makers refer to `lm` and `folder`, which must outlive them.
struct MergedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<at::Tensor()> make;
};

// How merged_tensor_makers gives the experts of a sparse layer: under the names and in the
// layout the folder stores them (merged ahead), or `stacked`: in the place of the layer's first
// stored expert tensor, three tensors "<experts module>.gate_proj" [E, I, H], ".up_proj"
// [E, I, H] and ".down_proj" [E, H, I] (GGUF's ffn_gate_exps, ffn_up_exps, ffn_down_exps), each
// merged when made.
enum class ExpertTensors { as_stored, stacked };

std::vector<MergedTensor> merged_tensor_makers(const CausalLM& lm,
                                               const io::HfFolder& folder,
                                               at::ScalarType dtype,
                                               ExpertTensors experts = ExpertTensors::as_stored);

// Whether merged_tensors writes tied embeddings apart (see above): the merged config.json must
// then say tie_word_embeddings: false, or transformers would tie them again on load.
bool merge_unties_embeddings(const CausalLM& lm);

}  // namespace qtrain::engine::model
