// See layer_tensors.h and Note [Layer tensors] there.
#include "engine/model/layer_tensors.h"

#include <map>

#include <c10/util/Exception.h>

namespace qtrain::engine::model {

using P = LayerPart;

const std::string& layer_part_module(LayerPart part) {
  static const std::map<LayerPart, std::string> modules = {
      {P::input_norm, "input_layernorm"},
      {P::post_attn_norm, "post_attention_layernorm"},
      {P::pre_ff_norm, "pre_feedforward_layernorm"},
      {P::post_ff_norm, "post_feedforward_layernorm"},
      {P::q_norm, "self_attn.q_norm"},
      {P::k_norm, "self_attn.k_norm"},
      {P::post_ff_norm_1, "post_feedforward_layernorm_1"},
      {P::pre_ff_norm_2, "pre_feedforward_layernorm_2"},
      {P::post_ff_norm_2, "post_feedforward_layernorm_2"},
      {P::q, "self_attn.q_proj"},
      {P::k, "self_attn.k_proj"},
      {P::v, "self_attn.v_proj"},
      {P::o, "self_attn.o_proj"},
      {P::gate, "mlp.gate_proj"},
      {P::up, "mlp.up_proj"},
      {P::down, "mlp.down_proj"},
  };
  return modules.at(part);
}

const std::vector<LayerPart>& norm_parts() {
  static const std::vector<LayerPart> parts = {P::input_norm,
                                               P::post_attn_norm,
                                               P::pre_ff_norm,
                                               P::post_ff_norm,
                                               P::q_norm,
                                               P::k_norm,
                                               P::post_ff_norm_1,
                                               P::pre_ff_norm_2,
                                               P::post_ff_norm_2};
  return parts;
}

namespace {

// The member of a norm part, as at::Tensor or optional.
template <typename Layer>
auto* norm_member(Layer& layer, LayerPart part) {
  using Optional =
      std::conditional_t<std::is_const_v<Layer>, const std::optional<at::Tensor>, std::optional<at::Tensor>>;
  Optional* optional = nullptr;
  switch (part) {
    case P::input_norm:
      return &layer.input_norm;
    case P::post_attn_norm:
      return &layer.post_attn_norm;
    case P::pre_ff_norm:
      optional = &layer.pre_ff_norm;
      break;
    case P::post_ff_norm:
      optional = &layer.post_ff_norm;
      break;
    case P::q_norm:
      optional = &layer.q_norm;
      break;
    case P::k_norm:
      optional = &layer.k_norm;
      break;
    case P::post_ff_norm_1:
      optional = &layer.post_ff_norm_1;
      break;
    case P::pre_ff_norm_2:
      optional = &layer.pre_ff_norm_2;
      break;
    case P::post_ff_norm_2:
      optional = &layer.post_ff_norm_2;
      break;
    default:
      TORCH_CHECK(false, layer_part_module(part), " is not a norm");
  }
  return optional->has_value() ? &**optional : nullptr;
}

}  // namespace

const at::Tensor* find_norm(const DecoderLayer& layer, LayerPart part) {
  const auto* w = norm_member(layer, part);
  return w && w->defined() ? w : nullptr;
}

at::Tensor* find_norm(DecoderLayer& layer, LayerPart part) {
  auto* w = norm_member(layer, part);
  return w && w->defined() ? w : nullptr;
}

void set_norm(DecoderLayer& layer, LayerPart part, at::Tensor weight) {
  switch (part) {
    case P::input_norm:
      layer.input_norm = std::move(weight);
      return;
    case P::post_attn_norm:
      layer.post_attn_norm = std::move(weight);
      return;
    case P::pre_ff_norm:
      layer.pre_ff_norm = std::move(weight);
      return;
    case P::post_ff_norm:
      layer.post_ff_norm = std::move(weight);
      return;
    case P::q_norm:
      layer.q_norm = std::move(weight);
      return;
    case P::k_norm:
      layer.k_norm = std::move(weight);
      return;
    case P::post_ff_norm_1:
      layer.post_ff_norm_1 = std::move(weight);
      return;
    case P::pre_ff_norm_2:
      layer.pre_ff_norm_2 = std::move(weight);
      return;
    case P::post_ff_norm_2:
      layer.post_ff_norm_2 = std::move(weight);
      return;
    default:
      TORCH_CHECK(false, layer_part_module(part), " is not a norm");
  }
}

const LinearLayer& find_linear(const DecoderLayer& layer, LayerPart part) {
  switch (part) {
    case P::q:
      return layer.q;
    case P::k:
      return layer.k;
    case P::v:
      TORCH_CHECK(layer.v.has_value(), "layer ", layer.index, " has no v_proj (its values are k_proj's output)");
      return *layer.v;
    case P::o:
      return layer.o;
    case P::gate:
      return layer.gate;
    case P::up:
      return layer.up;
    case P::down:
      return layer.down;
    default:
      TORCH_CHECK(false, layer_part_module(part), " is not a linear");
  }
}

void set_linear(DecoderLayer& layer, LayerPart part, LinearLayer linear) {
  switch (part) {
    case P::q:
      layer.q = std::move(linear);
      return;
    case P::k:
      layer.k = std::move(linear);
      return;
    case P::v:
      layer.v = std::move(linear);
      return;
    case P::o:
      layer.o = std::move(linear);
      return;
    case P::gate:
      layer.gate = std::move(linear);
      return;
    case P::up:
      layer.up = std::move(linear);
      return;
    case P::down:
      layer.down = std::move(linear);
      return;
    default:
      TORCH_CHECK(false, layer_part_module(part), " is not a linear");
  }
}

std::vector<LayerTensor> layer_tensors(const ModelConfig& c, int64_t i) {
  const int64_t h = c.hidden_size;
  const auto a = c.attention(i);
  const int64_t q_out = c.num_heads * a.head_dim, kv_out = a.num_kv_heads * a.head_dim;
  // Gemma's norm after attention is not the Llama family's before the MLP.
  const bool gemma = c.gemma;
  std::vector<LayerTensor> t = {
      {P::input_norm, layer_part_module(P::input_norm), {h}, false, "attn_norm"},
      {P::post_attn_norm, layer_part_module(P::post_attn_norm), {h}, false, gemma ? "post_attention_norm" : "ffn_norm"},
  };
  if (gemma) {
    t.push_back({P::pre_ff_norm, layer_part_module(P::pre_ff_norm), {h}, false, "ffn_norm"});
    t.push_back({P::post_ff_norm, layer_part_module(P::post_ff_norm), {h}, false, "post_ffw_norm"});
  }
  if (c.qk_norm) {
    t.push_back({P::q_norm, layer_part_module(P::q_norm), {a.head_dim}, false, "attn_q_norm"});
    t.push_back({P::k_norm, layer_part_module(P::k_norm), {a.head_dim}, false, "attn_k_norm"});
  }
  if (c.arch == Architecture::gemma4 && c.layer_is_sparse(i)) {
    t.push_back({P::post_ff_norm_1, layer_part_module(P::post_ff_norm_1), {h}, false, ""});
    t.push_back({P::pre_ff_norm_2, layer_part_module(P::pre_ff_norm_2), {h}, false, ""});
    t.push_back({P::post_ff_norm_2, layer_part_module(P::post_ff_norm_2), {h}, false, ""});
  }
  t.push_back({P::q, layer_part_module(P::q), {q_out, h}, c.qkv_bias, "attn_q"});
  t.push_back({P::k, layer_part_module(P::k), {kv_out, h}, c.qkv_bias, "attn_k"});
  if (!a.k_eq_v) t.push_back({P::v, layer_part_module(P::v), {kv_out, h}, c.qkv_bias, "attn_v"});
  t.push_back({P::o, layer_part_module(P::o), {h, q_out}, c.o_bias, "attn_output"});
  if (c.layer_has_dense_mlp(i)) {
    t.push_back({P::gate, layer_part_module(P::gate), {c.intermediate_size, h}, c.mlp_bias, "ffn_gate"});
    t.push_back({P::up, layer_part_module(P::up), {c.intermediate_size, h}, c.mlp_bias, "ffn_up"});
    t.push_back({P::down, layer_part_module(P::down), {h, c.intermediate_size}, c.mlp_bias, "ffn_down"});
  }
  return t;
}

}  // namespace qtrain::engine::model
