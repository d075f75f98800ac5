// Causal self-attention through at::scaled_dot_product_attention (flash / memory-efficient
// kernels on CUDA, the math kernel on CPU), with grouped-query heads and an optional sliding
// window (Mistral, Gemma's sliding layers); with a logit soft-cap (Gemma 2), which no fused
// kernel takes, through explicit float32 softmax as transformers' eager attention.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

struct AttentionOptions {
  std::optional<int64_t> sliding_window;  // key j visible to query i only if i - j < window
  std::optional<double> scale;            // of q·k; default 1/sqrt(d) (Gemma: query_pre_attn_scalar^-0.5)
  std::optional<double> softcap;          // scores = softcap * tanh(scores / softcap), before the mask
};

// q: [B, heads, T, d]; k, v: [B, kv_heads, T, d] with heads % kv_heads == 0. Key j is visible to
// query i iff j <= i and (no window or i - j < window) and, with `segments` (int64 [B, T]: the
// packed sample each token belongs to, -1 for padding), both are in the same segment. A padding
// token sees only itself (a query that sees nothing would make softmax NaN). Returns
// [B, heads, T, d].
// Whether causal_attention gives every query head its own copy of k and v before the fused
// kernel (see Note [Which CUDA attention kernel]): on CUDA, with grouped-query heads, where flash
// cannot run (a mask, head_dim over 256, or float32). The memory plan counts the copies where this
// says so.
bool attention_expands_kv(
    bool cuda, at::ScalarType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim, bool masked);

at::Tensor causal_attention(const at::Tensor& q,
                            const at::Tensor& k,
                            const at::Tensor& v,
                            const AttentionOptions& options = {},
                            const at::Tensor& segments = {});

// Attention with the visibility given: q [B, heads, Tq, d]; k, v [B, kv_heads, Tk, d]; `visible`
// bool [B or 1, 1, Tq, Tk], true where query i sees key j (every query must see a key). The
// window of `options` is not applied: it is the caller's mask. What decoding with a KV cache runs
// (engine/model/kv_cache.h), through the same kernels as causal_attention.
at::Tensor masked_attention(const at::Tensor& q,
                            const at::Tensor& k,
                            const at::Tensor& v,
                            const at::Tensor& visible,
                            const AttentionOptions& options = {});

}  // namespace qtrain::ops
