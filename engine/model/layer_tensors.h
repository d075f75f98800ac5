// The tensors of a decoder layer, per architecture, in one table: what loading reads, init-model
// writes, the memory estimate counts, the norms trained in full are named by and GGUF export
// renames. See Note [Layer tensors].
//
// Note [Layer tensors]
// layer_tensors(c, i) lists decoder layer i's norms and linears, named after
// "<weight prefix>layers.<i>." as transformers names the modules ("<module>.weight", a linear's
// "<module>.bias"), with their shapes and the name llama.cpp's converter gives them after
// "blk.<i>." (empty where it writes none):
//   input_layernorm          [H]           attn_norm
//   post_attention_layernorm [H]           ffn_norm (Llama family); post_attention_norm (Gemma)
//   pre_feedforward_layernorm, post_feedforward_layernorm [H] (Gemma)   ffn_norm, post_ffw_norm
//   self_attn.q_norm, k_norm [head_dim] (Qwen3, Gemma 3 and 4)          attn_q_norm, attn_k_norm
//   self_attn.q_proj, k_proj, v_proj (none on Gemma 4's k_eq_v layers), o_proj   attn_q, attn_k,
//                            attn_v, attn_output; with biases where qkv_bias / o_bias
//   mlp.gate_proj, up_proj, down_proj where the layer has the dense MLP      ffn_gate, ffn_up,
//                            ffn_down; with biases where mlp_bias
//   post_feedforward_layernorm_1, pre_feedforward_layernorm_2, post_feedforward_layernorm_2 [H]
//                            (Gemma 4's sparse layers)
// Outside the table, because their stored names come in several layouts or belong to one
// architecture: a sparse layer's router and experts (Note [Expert tensor names] in causal_lm.cpp)
// and Gemma 4's layer_scalar and router.
#pragma once

#include <string>
#include <vector>

#include "engine/model/decoder_layer.h"
#include "engine/model/model_config.h"

namespace qtrain::engine::model {

// The member of DecoderLayer a table entry fills.
enum class LayerPart {
  input_norm,
  post_attn_norm,
  pre_ff_norm,
  post_ff_norm,
  q_norm,
  k_norm,
  q,
  k,
  v,
  o,
  gate,
  up,
  down,
  post_ff_norm_1,
  pre_ff_norm_2,
  post_ff_norm_2,
};

struct LayerTensor {
  LayerPart part;
  std::string module;          // after "layers.<i>.", e.g. "self_attn.q_proj"
  std::vector<int64_t> shape;  // a norm's [n], a linear's [out, in]
  bool bias = false;           // a linear whose bias the architecture has ("<module>.bias" [out])
  std::string gguf;            // llama.cpp's name after "blk.<i>.", without ".weight"

  bool linear() const { return shape.size() == 2; }
};

// Decoder layer i's norms and linears (Note [Layer tensors]), norms first.
std::vector<LayerTensor> layer_tensors(const ModelConfig& c, int64_t i);

// The module a part is named by in every architecture (after "layers.<i>.").
const std::string& layer_part_module(LayerPart part);

// The norms, in the table's order: what DecoderLayer::norms() names.
const std::vector<LayerPart>& norm_parts();

// The member of `layer` holding a norm part's weight; null where the layer has none.
const at::Tensor* find_norm(const DecoderLayer& layer, LayerPart part);
at::Tensor* find_norm(DecoderLayer& layer, LayerPart part);

// The linear of a linear part; an error where the layer has none (v on k_eq_v layers).
const LinearLayer& find_linear(const DecoderLayer& layer, LayerPart part);

// Puts a part's weight (a norm) or linear into its member of `layer`.
void set_norm(DecoderLayer& layer, LayerPart part, at::Tensor weight);
void set_linear(DecoderLayer& layer, LayerPart part, LinearLayer linear);

}  // namespace qtrain::engine::model
