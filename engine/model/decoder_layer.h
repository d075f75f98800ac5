// One decoder layer of the Llama family (Llama, Mistral, Qwen2, Qwen3):
//   h = h + o(attention(rope(norm_q(q(x))), rope(norm_k(k(x))), v(x)))   with x = input_norm(h)
//   h = h + down(silu(gate(x)) * up(x))                                  with x = post_attn_norm(h)
// with the MLP replaced by routed experts on the sparse layers of Qwen3-MoE and Mixtral
// (engine/model/moe_block.h), or of Gemma 2 and 3, see Note [Gemma decoder], or of Gemma 4, see
// Note [Gemma 4 decoder]. The layer only computes; when its weights are resident and whether it is
// recomputed is the scheduler's business (engine/schedule).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/model/kv_cache.h"
#include "engine/model/linear_layer.h"
#include "engine/model/load_balancing.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_block.h"
#include "ops/nn/rope.h"

namespace qtrain::engine::model {

// Note [Gemma decoder]
// transformers' Gemma2DecoderLayer and Gemma3DecoderLayer (modeling_gemma2.py, modeling_gemma3.py):
//   h = h + post_attn_norm(o(attention(x)))        with x = input_norm(h)
//   h = h + post_ff_norm(down(gelu_tanh(gate(x)) * up(x)))   with x = pre_ff_norm(h)
// - every norm (the four per layer, Gemma 3's q/k norms over head_dim, the final norm) is
//   x / rms(x) * (1 + w) in float32, cast last (ops::gemma_rms_norm);
// - the embeddings are multiplied by sqrt(hidden_size), a float32 scalar cast to the embedding
//   dtype first (Gemma2TextScaledWordEmbedding: in bfloat16 sqrt(2304) = 48 becomes 48, sqrt(3072)
//   = 55.43 becomes 55.5);
// - attention scores are scaled by query_pre_attn_scalar^-0.5, not head_dim^-0.5; Gemma 2 caps
//   them (50 * tanh(s / 50)) between the scale and the mask. Gemma 3's config may carry
//   attn_logit_softcapping but transformers never applies it;
// - sliding layers (Gemma 2: even indices; Gemma 3: all but every sliding_window_pattern-th, or
//   layer_types) see the last sliding_window keys; Gemma 3's sliding layers also have their own
//   rope (rope_local_base_freq, unscaled), the full layers rope_theta with rope_scaling;
// - the final logits are capped (Gemma 2: 30 * tanh(z / 30)) before the loss, in the compute
//   dtype, inside the chunked cross-entropy (ops/nn/cross_entropy.h).

// Note [Gemma 4 decoder]
// transformers' Gemma4TextDecoderLayer and Gemma4TextAttention (modeling_gemma4.py) keep Gemma's
// sandwich norms, sqrt(hidden_size) embedding scale, GeGLU and final soft-cap, and change:
// - every norm is x * pow(mean(x^2) + eps, -0.5) * w in float32, cast last: the weight itself
//   (initialised to ones), not (1 + w) (ops::gemma4_rms_norm);
// - attention is unscaled (scaling 1.0: the q and k norms take the place of 1/sqrt(head_dim));
// - values are RMS-normalised over head_dim without a weight (v_norm), after the projection and
//   without rope;
// - full-attention layers have their own head_dim (global_head_dim) and kv head count, and with
//   attention_k_eq_v no v_proj: the values are the raw k_proj output (before k_norm and rope),
//   then v_norm (ModelConfig::layer_attention);
// - sliding and full layers have their own rope; the full layers' is "proportional": only the
//   first partial_rotary_factor of the frequency pairs rotate, with exponents over the whole
//   head_dim (ops::rope_inv_freq);
// - the layer's output, residual included, is multiplied by layer_scalar, a [1] tensor stored in
//   the checkpoint;
// - the last layer is always full attention (ModelConfig::from_json);
// - with enable_moe_block every layer runs routed experts beside the dense MLP, each with its own
//   norms, and the two are added before post_feedforward_layernorm (x is the stream after
//   attention):
//     m1 = post_ff_norm_1(mlp(pre_ff_norm(x)))
//     m2 = post_ff_norm_2(experts(pre_ff_norm_2(x), route(x)))   the router reads x itself
//     x  = (x + post_ff_norm(m1 + m2)) * layer_scalar
//   with route() as Note [Gemma 4 router] and the experts' GeGLU (tanh GELU) as Note [Grouped
//   expert compute]: the K expert rows of a token are weighted by the float32 routing weights and
//   summed in float32, as transformers' default grouped_mm kernel does.

// A layer's dense MLP as a function of its input [..., H], and what runs it: the runner is given
// the MLP (which stays valid as long as the model, so it may be called again in backward), its
// input and its trainable tensors (the LoRA A and B of gate, up and down). Tiled MLP
// (engine/schedule/tiled_mlp.h) runs it in chunks of tokens.
using MlpFn = std::function<at::Tensor(const at::Tensor&)>;
using MlpRunner = std::function<at::Tensor(MlpFn mlp, const at::Tensor& x, std::vector<at::Tensor> params)>;

// What every layer of one step shares besides the hidden state.
struct LayerInputs {
  ops::RopeTables rope;
  ops::RopeTables sliding_rope;  // undefined unless sliding layers have their own rope (Gemma 3, 4)
  at::Tensor segments;           // int64 [B, T]: packed sample of each token, -1 on padding; undefined: one per row
  // When set, every sparse layer's forward appends its router logits [B*T, E] here, in layer
  // order (transformers' output_router_logits). Layers run under a checkpoint do not record.
  std::vector<at::Tensor>* router_logits = nullptr;
  // When set, every sparse layer's forward appends its RouterLoad here, in layer order, weighting
  // the tokens by router_token_weights (float32 [B*T]: 1 on a token, 0 on padding). See Note
  // [Load-balancing loss]; unlike router_logits, checkpointed layers record too.
  std::vector<RouterLoad>* router_loads = nullptr;
  at::Tensor router_token_weights;
  // Runs each layer's dense MLP; unset: called directly.
  MlpRunner mlp_runner;
  // When set, the tokens continue what the cache holds: each layer appends its keys and values
  // there and attends over all of them (Note [KV cache]); rope comes from per-token positions.
  KvCache* kv_cache = nullptr;

  // The tables a layer uses: its own for a sliding layer where there are any.
  const ops::RopeTables& rope_for(bool sliding) const {
    return sliding && sliding_rope.cos.defined() ? sliding_rope : rope;
  }
};

// The model's RMSNorm (Llama's, Gemma 2/3's (1 + w), Gemma 4's); weight undefined: none (Gemma 4).
at::Tensor model_rms_norm(const ModelConfig& config, const at::Tensor& x, const at::Tensor& weight);

struct DecoderLayer {
  int64_t index = 0;
  at::Tensor input_norm;                                // [H]
  at::Tensor post_attn_norm;                            // [H]; Gemma: on the attention output
  std::optional<at::Tensor> pre_ff_norm, post_ff_norm;  // [H], Gemma
  std::optional<at::Tensor> q_norm, k_norm;             // [head_dim], Qwen3, Gemma 3 and 4
  // [H], Gemma 4's expert block: after the dense MLP, before and after the experts.
  std::optional<at::Tensor> post_ff_norm_1, pre_ff_norm_2, post_ff_norm_2;
  LinearLayer q, k;
  std::optional<LinearLayer> v;   // absent where the values are k's output (LayerAttention::k_eq_v)
  LinearLayer o, gate, up, down;  // gate, up, down: the dense MLP, empty on a sparse layer but Gemma 4's
  std::optional<MoeBlock> moe;    // a sparse layer's router and experts
  at::Tensor layer_scalar;        // [1], Gemma 4; undefined otherwise
  LayerAttention attention;
  std::optional<int64_t> sliding_window;

  // h: [B, T, H] in the compute dtype. Residual adds are out of place (a checkpoint saves h).
  at::Tensor forward(const at::Tensor& h, const LayerInputs& inputs, const ModelConfig& config, bool training) const;

  // The layer's linear modules (attention, and the dense MLP where there is one: dense layers,
  // and every Gemma 4 layer): what LoRA target_modules name and what merging and quantizing export.
  std::vector<const LinearLayer*> linears() const;
  std::vector<LinearLayer*> linears();
  bool has_dense_mlp() const { return !moe || moe->gemma4_router.has_value(); }
  // Every frozen base weight held as a LinearLayer: linears() and then, on a sparse layer, each
  // expert's gate_up and down (expert by expert). What offload moves and what the weight bytes count.
  std::vector<const LinearLayer*> weight_linears() const;
  std::vector<LinearLayer*> weight_linears();
  // The trainable tensors of this layer (LoRA A and B of every adapted linear, DoRA magnitudes,
  // then the norms trained in full), in a fixed order: what a checkpointed layer differentiates.
  std::vector<at::Tensor> trainable_parameters() const;
  // The dense MLP's: LoRA A and B of gate, up and down where adapted.
  std::vector<at::Tensor> mlp_parameters() const;
  // The layer's norm weights it has, by module name under the layer as transformers names them
  // ("input_layernorm", "self_attn.q_norm", ...): what modules_to_save and unfrozen_parameters
  // can train in full (Note [Modules trained in full]).
  std::vector<std::pair<std::string, const at::Tensor*>> norms() const;
  std::vector<std::pair<std::string, at::Tensor*>> norms();
};

}  // namespace qtrain::engine::model
