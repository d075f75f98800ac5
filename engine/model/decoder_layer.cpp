// See decoder_layer.h.
#include "engine/model/decoder_layer.h"

#include <cmath>

#include <ATen/ATen.h>

#include "engine/lora/adapters_off.h"
#include "engine/model/layer_tensors.h"
#include "ops/nn/attention.h"
#include "ops/nn/rms_norm.h"

namespace qtrain::engine::model {

at::Tensor model_rms_norm(const ModelConfig& c, const at::Tensor& x, const at::Tensor& weight) {
  if (c.arch == Architecture::gemma4) return ops::gemma4_rms_norm(x, weight, c.rms_norm_eps);
  return c.gemma ? ops::gemma_rms_norm(x, weight, c.rms_norm_eps) : ops::rms_norm(x, weight, c.rms_norm_eps);
}

at::Tensor DecoderLayer::forward(const at::Tensor& h,
                                 const LayerInputs& inputs,
                                 const ModelConfig& c,
                                 bool training) const {
  const auto& rope = inputs.rope_for(sliding_window.has_value());
  const int64_t b = h.size(0), t = h.size(1);
  const int64_t hd = attention.head_dim, kv_heads = attention.num_kv_heads;
  const bool gemma4 = c.arch == Architecture::gemma4;
  auto norm = [&](const at::Tensor& x, const at::Tensor& w) { return model_rms_norm(c, x, w); };
  // Attention. q: [B, T, nH, hd] -> [B, nH, T, hd].
  auto x = norm(h, input_norm);
  auto qh = q.forward(x, training).view({b, t, c.num_heads, hd});
  auto kh = k.forward(x, training).view({b, t, kv_heads, hd});
  // See Note [Gemma 4 decoder] for k_eq_v and the weightless v norm.
  auto vh = v ? v->forward(x, training).view({b, t, kv_heads, hd}) : kh;
  if (gemma4) vh = norm(vh, at::Tensor());
  if (q_norm) {
    qh = norm(qh, *q_norm);
    kh = norm(kh, *k_norm);
  }
  qh = ops::rope_apply(qh.transpose(1, 2), rope);
  kh = ops::rope_apply(kh.transpose(1, 2), rope);
  ops::AttentionOptions options{sliding_window, std::nullopt, c.attn_logit_softcap};
  if (c.query_pre_attn_scalar) options.scale = 1.0 / std::sqrt(*c.query_pre_attn_scalar);
  if (gemma4) options.scale = 1.0;
  at::Tensor attn;
  if (inputs.kv_cache != nullptr) {
    const auto [keys, values] = inputs.kv_cache->append(index, kh, vh.transpose(1, 2));
    attn = ops::masked_attention(qh, keys, values, inputs.kv_cache->visible(sliding_window), options);
  } else {
    attn = ops::causal_attention(qh, kh, vh.transpose(1, 2), options, inputs.segments);
  }
  auto a = o.forward(attn.transpose(1, 2).reshape({b, t, c.num_heads * hd}), training);
  // Gated MLP: SwiGLU, or Gemma's GeGLU with its norms around it (See Note [Gemma decoder]). It
  // holds the layer and the config, not this call's locals: a runner may call it in backward.
  const MlpFn dense_mlp = [layer = this, &c, training](const at::Tensor& x) {
    auto g = layer->gate.forward(x, training);
    g = c.hidden_act == Activation::gelu_tanh ? at::gelu(g, "tanh") : at::silu(g);
    return layer->down.forward(g * layer->up.forward(x, training), training);
  };
  auto mlp = [&](const at::Tensor& x) {
    return inputs.mlp_runner ? inputs.mlp_runner(dense_mlp, x, mlp_parameters()) : dense_mlp(x);
  };
  if (c.gemma) {
    auto h1 = h + norm(a, post_attn_norm);
    auto ff = mlp(norm(h1, *pre_ff_norm));
    if (moe) {
      // Gemma 4's experts beside the dense MLP (See Note [Gemma 4 decoder]).
      const auto flat = h1.reshape({-1, h1.size(-1)});
      const auto routing = gemma4_route(
          *moe->gemma4_router, flat, moe->router_lora && lora::adapters_on() ? &*moe->router_lora : nullptr, training);
      if (inputs.router_logits != nullptr) inputs.router_logits->push_back(routing.logits);
      const auto experts = moe->experts.forward(norm(flat, *pre_ff_norm_2), routing, training).view(h1.sizes());
      ff = norm(ff, *post_ff_norm_1) + norm(experts, *post_ff_norm_2);
    }
    auto out = h1 + norm(ff, *post_ff_norm);
    return layer_scalar.defined() ? out * layer_scalar : out;
  }
  if (moe) {
    auto h1 = h + a;
    std::vector<at::Tensor> logits;
    auto* record = inputs.router_logits != nullptr ? inputs.router_logits : &logits;
    auto y = moe->forward(norm(h1, post_attn_norm), *c.moe, training, record);
    if (inputs.router_loads != nullptr) {
      inputs.router_loads->push_back(router_load(record->back(), inputs.router_token_weights, c.moe->top_k));
    }
    return h1 + y;
  }
  auto h1 = h + a;
  return h1 + mlp(norm(h1, post_attn_norm));
}

namespace {

// The linears of `layer` (const or not) in blob order; with `experts`, a sparse layer's experts
// after its attention (and Gemma 4's dense MLP).
template <typename Layer>
auto linears_of(Layer& layer, bool experts) {
  std::vector<decltype(&layer.q)> out = {&layer.q, &layer.k};
  if (layer.v) out.push_back(&*layer.v);
  out.push_back(&layer.o);
  if (layer.has_dense_mlp()) {
    out.push_back(&layer.gate);
    out.push_back(&layer.up);
    out.push_back(&layer.down);
  }
  if (layer.moe && experts) {
    for (int64_t e = 0; e < layer.moe->experts.num_experts(); ++e) {
      out.push_back(&layer.moe->experts.gate_up[e]);
      out.push_back(&layer.moe->experts.down[e]);
    }
  }
  return out;
}

// The norm weights of `layer` (const or not), named as transformers names their modules (Note
// [Layer tensors]).
template <typename Layer>
auto norms_of(Layer& layer) {
  std::vector<std::pair<std::string, decltype(&layer.input_norm)>> out;
  for (const LayerPart part : norm_parts()) {
    if (auto* w = find_norm(layer, part)) out.emplace_back(layer_part_module(part), w);
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, const at::Tensor*>> DecoderLayer::norms() const {
  return norms_of(*this);
}

std::vector<std::pair<std::string, at::Tensor*>> DecoderLayer::norms() {
  return norms_of(*this);
}

std::vector<const LinearLayer*> DecoderLayer::linears() const {
  return linears_of(*this, false);
}

std::vector<LinearLayer*> DecoderLayer::linears() {
  return linears_of(*this, false);
}

std::vector<const LinearLayer*> DecoderLayer::weight_linears() const {
  return linears_of(*this, true);
}

std::vector<LinearLayer*> DecoderLayer::weight_linears() {
  return linears_of(*this, true);
}

std::vector<at::Tensor> DecoderLayer::mlp_parameters() const {
  std::vector<at::Tensor> params;
  if (!has_dense_mlp()) return params;
  for (const auto* l : {&gate, &up, &down}) {
    if (l->lora) {
      params.push_back(l->lora->a);
      params.push_back(l->lora->b);
      if (l->lora->magnitude.defined()) params.push_back(l->lora->magnitude);
    }
  }
  return params;
}

std::vector<at::Tensor> DecoderLayer::trainable_parameters() const {
  std::vector<at::Tensor> params;
  for (const auto* l : linears()) {
    if (l->lora) {
      params.push_back(l->lora->a);
      params.push_back(l->lora->b);
      if (l->lora->magnitude.defined()) params.push_back(l->lora->magnitude);
    }
  }
  if (moe) {
    if (moe->router_lora) {
      params.push_back(moe->router_lora->a);
      params.push_back(moe->router_lora->b);
      if (moe->router_lora->magnitude.defined()) params.push_back(moe->router_lora->magnitude);
    }
    for (const auto* l : {&moe->experts.gate_up_lora, &moe->experts.down_lora}) {
      if (*l) {
        params.push_back((*l)->stacked.a);
        params.push_back((*l)->stacked.b);
      }
    }
  }
  for (const auto& [name, weight] : norms()) {
    if (weight->requires_grad()) params.push_back(*weight);  // trained in full
  }
  return params;
}

}  // namespace qtrain::engine::model
