// See decoder_layer.h.
#include "engine/model/decoder_layer.h"

#include <ATen/ATen.h>

#include "ops/nn/attention.h"
#include "ops/nn/rms_norm.h"

namespace qtrain::engine::model {

at::Tensor DecoderLayer::forward(const at::Tensor& h,
                                 const LayerInputs& inputs,
                                 const ModelConfig& c,
                                 bool training) const {
  const auto& rope = inputs.rope;
  const int64_t b = h.size(0), t = h.size(1);
  const double eps = c.rms_norm_eps;
  // Attention. q: [B, T, nH, hd] -> [B, nH, T, hd].
  auto x = ops::rms_norm(h, input_norm, eps);
  auto qh = q.forward(x, training).view({b, t, c.num_heads, c.head_dim});
  auto kh = k.forward(x, training).view({b, t, c.num_kv_heads, c.head_dim});
  auto vh = v.forward(x, training).view({b, t, c.num_kv_heads, c.head_dim});
  if (q_norm) {
    qh = ops::rms_norm(qh, *q_norm, eps);
    kh = ops::rms_norm(kh, *k_norm, eps);
  }
  qh = ops::rope_apply(qh.transpose(1, 2), rope);
  kh = ops::rope_apply(kh.transpose(1, 2), rope);
  auto attn = ops::causal_attention(qh, kh, vh.transpose(1, 2), sliding_window, inputs.segments);
  auto h1 = h + o.forward(attn.transpose(1, 2).reshape({b, t, c.num_heads * c.head_dim}), training);
  // SwiGLU MLP.
  x = ops::rms_norm(h1, post_attn_norm, eps);
  return h1 + down.forward(at::silu(gate.forward(x, training)) * up.forward(x, training), training);
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
