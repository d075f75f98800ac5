// The load-balancing (auxiliary) loss of Qwen3-MoE and Mixtral: what each sparse layer's router
// contributes (RouterLoad, recorded by the layer's forward) and the loss over all of them. See
// Note [Load-balancing loss].
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace qtrain::engine::model {

// Note [Load-balancing loss]
// transformers 5.23's load_balancing_loss_func (modeling_qwen3_moe.py, modeling_mixtral.py, the
// same function), over the router logits of the L sparse layers of one forward (N = B*T tokens,
// w_t the attention mask: 1 on a token, 0 on padding; all 1 without padding):
//     p_l     = softmax(logits_l)                        [N, E], in the logits' dtype
//     S_l     = topk(p_l, K).indices                      the K experts each token counts for
//     f_e     = sum_l sum_t w_t #{k : S_l[t,k] = e} / D   D = L * sum_t w_t; sum_e f_e = K
//     P_e     = sum_l sum_t w_t p_l[t,e] / D
//     aux     = E * sum_e f_e P_e                         K for perfectly even routing
// The counts (f) carry no gradient; P does, through the router logits into the hidden state the
// router reads. So with the routers frozen the loss still moves the LoRA weights of the attention
// of every sparse layer and everything before it (transformers' router weight is frozen by PEFT and
// the gradient takes the same way).
// The model adds router_aux_loss_coef * aux to the loss of every forward when config.json (or the
// run's model_config) sets output_router_logits; transformers' default is off. A forward records
// only the L per-expert sums (RouterLoad) instead of the [N, E] logits: the loss needs no more, and
// a checkpointed layer returns its sum as a second output so the gradient reaches it through the
// recompute (engine/schedule/checkpoint.h), while the counts come from the forward alone.
struct RouterLoad {
  at::Tensor prob_sum;  // float32 [E]: sum_t w_t p[t, e]; differentiable in the router's input
  at::Tensor counts;    // float32 [E]: sum_t w_t #{k : S[t,k] = e}; no gradient
};

// logits: [N, E] (the router's, in the compute dtype); token_weights: float32 [N].
RouterLoad router_load(const at::Tensor& logits, const at::Tensor& token_weights, int64_t top_k);

// The loss over the sparse layers of one forward, float32 scalar. token_weights as above.
at::Tensor load_balancing_loss(const std::vector<RouterLoad>& layers, const at::Tensor& token_weights);

}  // namespace qtrain::engine::model
