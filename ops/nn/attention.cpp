// See attention.h.
#include "ops/nn/attention.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

namespace qtrain::ops {
namespace {

// transformers' eager_attention_forward (modeling_gemma2.py): scores in q's dtype, capped, masked,
// softmax in float32 and cast back, then times v. It keeps the [B, heads, T, T] scores for
// backward: this path is for the soft-capped attention of Gemma 2, which no fused kernel computes.
at::Tensor softcapped_attention(const at::Tensor& q,
                                const at::Tensor& k,
                                const at::Tensor& v,
                                const at::Tensor& visible,
                                double scale,
                                double softcap) {
  const int64_t group = q.size(1) / k.size(1);
  const auto kr = group == 1 ? k : k.repeat_interleave(group, 1);
  const auto vr = group == 1 ? v : v.repeat_interleave(group, 1);
  auto scores = at::matmul(q, kr.transpose(2, 3)) * scale;
  scores = at::tanh(scores / softcap) * softcap;
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), vr);
}

}  // namespace

// Note [Which CUDA attention kernel]
// torch's scaled_dot_product_attention on CUDA picks the first kernel that takes the call:
// - flash: grouped-query heads (enable_gqa) and is_causal, but only in bfloat16 or float16, with
//   no mask tensor and head_dim at most 256;
// - memory-efficient: a mask and any head_dim (Gemma 4's 512-wide global heads included), but no
//   grouped-query heads;
// - cuDNN: no head_dim of 512;
// - math, the rest: it upcasts to float32 and keeps [B, heads, T, T] float32 scores and
//   probabilities, about 0.5 GB a layer at 2048 tokens, which the memory plan does not count.
// So where flash cannot run and k and v have fewer heads than q, every query head gets its own k
// and v (B x heads x T x d each, far less than T x T) and the memory-efficient kernel takes it.
bool attention_expands_kv(
    bool cuda, at::ScalarType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim, bool masked) {
  constexpr int64_t kFlashMaxHeadDim = 256;
  const bool flash_dtype = dtype == at::kBFloat16 || dtype == at::kHalf;
  return cuda && heads != kv_heads && (masked || head_dim > kFlashMaxHeadDim || !flash_dtype);
}

at::Tensor causal_attention(const at::Tensor& q,
                            const at::Tensor& k,
                            const at::Tensor& v,
                            const AttentionOptions& options,
                            const at::Tensor& segments) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "causal_attention: q, k, v must be [B, heads, T, d]");
  TORCH_CHECK(q.size(1) % k.size(1) == 0,
              "causal_attention: ",
              q.size(1),
              " query heads are not a multiple of ",
              k.size(1),
              " key/value heads");
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const auto& sliding_window = options.sliding_window;
  const int64_t t = q.size(2);
  const bool gqa = q.size(1) != k.size(1);
  const bool windowed = sliding_window && *sliding_window < t;
  const bool masked = windowed || segments.defined();
  // See Note [Which CUDA attention kernel].
  const bool expand = attention_expands_kv(q.is_cuda(), q.scalar_type(), q.size(1), k.size(1), q.size(-1), masked);
  if (!masked && !options.softcap) {
    // The fused kernels, causal without a mask; else masked_attention with the mask built here.
    const int64_t group = q.size(1) / k.size(1);
    return at::scaled_dot_product_attention(q,
                                            expand ? k.repeat_interleave(group, 1) : k,
                                            expand ? v.repeat_interleave(group, 1) : v,
                                            std::nullopt,
                                            /*dropout_p=*/0.0,
                                            /*is_causal=*/true,
                                            scale,
                                            /*enable_gqa=*/gqa && !expand);
  }
  auto i = at::arange(t, q.options().dtype(at::kLong)).unsqueeze(1);
  auto j = at::arange(t, q.options().dtype(at::kLong)).unsqueeze(0);
  auto visible = j <= i;  // [T, T], true = attend
  if (windowed) visible = visible.logical_and(i - j < *sliding_window);
  if (segments.defined()) {
    TORCH_CHECK(segments.dim() == 2 && segments.size(0) == q.size(0) && segments.size(1) == t,
                "causal_attention: segments must be [",
                q.size(0),
                ", ",
                t,
                "], got ",
                segments.sizes());
    auto same = segments.unsqueeze(2) == segments.unsqueeze(1);  // [B, T, T]
    auto pad_self = (segments < 0).unsqueeze(2).logical_and(i == j);
    visible = visible.logical_and(same).logical_and((segments >= 0).unsqueeze(2)).logical_or(pad_self).unsqueeze(1);
  }
  return masked_attention(q, k, v, visible, options);
}

at::Tensor masked_attention(const at::Tensor& q,
                            const at::Tensor& k,
                            const at::Tensor& v,
                            const at::Tensor& visible,
                            const AttentionOptions& options) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "masked_attention: q, k, v must be [B, heads, T, d]");
  TORCH_CHECK(q.size(1) % k.size(1) == 0,
              "masked_attention: ",
              q.size(1),
              " query heads are not a multiple of ",
              k.size(1),
              " key/value heads");
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (options.softcap) return softcapped_attention(q, k, v, visible, scale, *options.softcap);
  // See Note [Which CUDA attention kernel].
  const bool gqa = q.size(1) != k.size(1);
  const bool expand = attention_expands_kv(q.is_cuda(), q.scalar_type(), q.size(1), k.size(1), q.size(-1), true);
  const int64_t group = q.size(1) / k.size(1);
  return at::scaled_dot_product_attention(q,
                                          expand ? k.repeat_interleave(group, 1) : k,
                                          expand ? v.repeat_interleave(group, 1) : v,
                                          visible,
                                          /*dropout_p=*/0.0,
                                          /*is_causal=*/false,
                                          scale,
                                          /*enable_gqa=*/gqa && !expand);
}

}  // namespace qtrain::ops
