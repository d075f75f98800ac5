// Cross-entropy of a language-model head, computed in chunks of tokens so that the float32
// logits of all tokens ([tokens, vocab], 1 GiB for 2048 tokens of a 128k vocabulary) never exist
// at once. Backward recomputes each chunk's logits instead of saving them. Gemma 2's final logit
// soft-cap (logits = cap * tanh(logits / cap)) is applied per chunk too, so the capped logits
// never exist in full either.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

namespace qtrain::ops {

inline constexpr int64_t kIgnoreIndex = -100;

// Note [Loss chunk size]
// A chunk's working set is two float32 copies of its logits at once: forward holds the logits
// and log-sum-exp's temporary (exp(logits - max)); backward drops the logits in the compute
// dtype once they are in float32, and the float32 logits once their softmax exists, and scales
// the softmax in place. 8 bytes a logit, plus with a soft-cap the tanh the slope is taken from,
// in the compute dtype (the raw, divided and capped logits in forward are three of those too).
// These are the allocations themselves, measured (CrossEntropy.AChunkHoldsTheBytesItIsSizedBy).
// A chunk takes at most kCrossEntropyChunkTokens tokens and at most as many as keep that working
// set within kCrossEntropyChunkBytes: 408 tokens for Gemma's 262,144-token vocabulary in
// bfloat16 with the cap (0.996 GiB, where 1,024 tokens took 4.5 GiB of a 24 GiB card before the
// chunk was sized in bytes), 1,024 for Llama 3's 128,256 (0.98 GiB). The output head's product
// stays large ([408, H] x [H, 262144]), so the smaller chunks cost kernel launches, not
// efficiency.
inline constexpr int64_t kCrossEntropyChunkTokens = 1024;
inline constexpr int64_t kCrossEntropyChunkBytes = int64_t{1} << 30;

// Bytes one logit of a live chunk takes (see the Note).
int64_t cross_entropy_bytes_per_logit(at::ScalarType dtype, bool softcap);

// Tokens per chunk for a vocabulary of `vocab` logits in `dtype` (see the Note): a multiple of 8
// (for the matrix units), from 8 to kCrossEntropyChunkTokens.
int64_t cross_entropy_chunk_tokens(int64_t vocab, at::ScalarType dtype, bool softcap);

// h: [N, H] final hidden states; weight: [V, H] the output head; labels: int64 [N], kIgnoreIndex
// for tokens that are not predicted. Returns the float32 SUM of the token losses (log-softmax in
// float32 over logits computed in h's dtype, as transformers does); gradients flow to h and, if
// it requires grad, to weight. Divide by the number of predicted tokens for the mean. With
// `softcap`, the logits are capped in h's dtype before the float32 log-softmax, as transformers'
// Gemma2ForCausalLM caps them before its loss. With `token_weights` (float32 [N], on h's device)
// each token's loss counts that many times in the sum (LD-DPO's weighting of a completion's
// tokens); undefined: once each.
at::Tensor chunked_cross_entropy_sum(const at::Tensor& h,
                                     const at::Tensor& weight,
                                     const at::Tensor& labels,
                                     int64_t chunk_tokens,
                                     std::optional<double> softcap = std::nullopt,
                                     const at::Tensor& token_weights = {});

// logits: [..., V] -> softcap * tanh(logits / softcap) in logits' dtype.
at::Tensor softcap_logits(const at::Tensor& logits, double softcap);

struct ChunkedCrossEntropyFunction : public torch::autograd::Function<ChunkedCrossEntropyFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& h,
                            const at::Tensor& weight,
                            const at::Tensor& labels,
                            const std::optional<at::Tensor>& token_weights,  // none: 1 each
                            int64_t chunk_tokens,
                            double softcap);  // 0: none
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out);
};

}  // namespace qtrain::ops
