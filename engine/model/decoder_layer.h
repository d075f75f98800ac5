// One decoder layer of the Llama family (Llama, Mistral, Qwen2, Qwen3):
//   h = h + o(attention(rope(norm_q(q(x))), rope(norm_k(k(x))), v(x)))   with x = input_norm(h)
//   h = h + down(silu(gate(x)) * up(x))                                  with x = post_attn_norm(h)
// The layer only computes; when its weights are resident and whether it is recomputed is the
// scheduler's business (engine/schedule).
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/model/linear_layer.h"
#include "engine/model/model_config.h"
#include "ops/nn/rope.h"

namespace qtrain::engine::model {

// What every layer of one step shares besides the hidden state.
struct LayerInputs {
  ops::RopeTables rope;
  at::Tensor segments;  // int64 [B, T]: packed sample of each token, -1 on padding; undefined: one per row
};

struct DecoderLayer {
  int64_t index = 0;
  at::Tensor input_norm;                     // [H]
  at::Tensor post_attn_norm;                 // [H]
  std::optional<at::Tensor> q_norm, k_norm;  // [head_dim], Qwen3
  LinearLayer q, k, v, o, gate, up, down;
  std::optional<int64_t> sliding_window;

  // h: [B, T, H] in the compute dtype. Residual adds are out of place (a checkpoint saves h).
  at::Tensor forward(const at::Tensor& h, const LayerInputs& inputs, const ModelConfig& config, bool training) const;

  std::vector<const LinearLayer*> linears() const;
  std::vector<LinearLayer*> linears();
  // The trainable tensors of this layer (LoRA A and B of every adapted linear), in a fixed order.
  std::vector<at::Tensor> trainable_parameters() const;
};

}  // namespace qtrain::engine::model
