// See decoder_layer.h.
#include "engine/model/decoder_layer.h"

#include <cmath>

#include <ATen/ATen.h>

#include "ops/nn/attention.h"
#include "ops/nn/rms_norm.h"

namespace qtrain::engine::model {

at::Tensor DecoderLayer::forward(const at::Tensor& h,
                                 const LayerInputs& inputs,
                                 const ModelConfig& c,
                                 bool training) const {
  const auto& rope = inputs.rope_for(sliding_window.has_value());
  const int64_t b = h.size(0), t = h.size(1);
  const double eps = c.rms_norm_eps;
  auto norm = [&](const at::Tensor& x, const at::Tensor& w) {
    return c.gemma ? ops::gemma_rms_norm(x, w, eps) : ops::rms_norm(x, w, eps);
  };
  // Attention. q: [B, T, nH, hd] -> [B, nH, T, hd].
  auto x = norm(h, input_norm);
  auto qh = q.forward(x, training).view({b, t, c.num_heads, c.head_dim});
  auto kh = k.forward(x, training).view({b, t, c.num_kv_heads, c.head_dim});
  auto vh = v.forward(x, training).view({b, t, c.num_kv_heads, c.head_dim});
  if (q_norm) {
    qh = norm(qh, *q_norm);
    kh = norm(kh, *k_norm);
  }
  qh = ops::rope_apply(qh.transpose(1, 2), rope);
  kh = ops::rope_apply(kh.transpose(1, 2), rope);
  ops::AttentionOptions attention{sliding_window, std::nullopt, c.attn_logit_softcap};
  if (c.query_pre_attn_scalar) attention.scale = 1.0 / std::sqrt(*c.query_pre_attn_scalar);
  auto attn = ops::causal_attention(qh, kh, vh.transpose(1, 2), attention, inputs.segments);
  auto a = o.forward(attn.transpose(1, 2).reshape({b, t, c.num_heads * c.head_dim}), training);
  // Gated MLP: SwiGLU, or Gemma's GeGLU with its norms around it (See Note [Gemma decoder]).
  auto mlp = [&](const at::Tensor& x) {
    auto g = gate.forward(x, training);
    g = c.hidden_act == Activation::gelu_tanh ? at::gelu(g, "tanh") : at::silu(g);
    return down.forward(g * up.forward(x, training), training);
  };
  if (c.gemma) {
    auto h1 = h + norm(a, post_attn_norm);
    return h1 + norm(mlp(norm(h1, *pre_ff_norm)), *post_ff_norm);
  }
  auto h1 = h + a;
  return h1 + mlp(norm(h1, post_attn_norm));
}

std::vector<const LinearLayer*> DecoderLayer::linears() const {
  return {&q, &k, &v, &o, &gate, &up, &down};
}

std::vector<LinearLayer*> DecoderLayer::linears() {
  return {&q, &k, &v, &o, &gate, &up, &down};
}

std::vector<at::Tensor> DecoderLayer::trainable_parameters() const {
  std::vector<at::Tensor> params;
  for (const auto* l : linears()) {
    if (l->lora) {
      params.push_back(l->lora->a);
      params.push_back(l->lora->b);
    }
  }
  return params;
}

}  // namespace qtrain::engine::model
