// See attention.h.
#include "ops/nn/attention.h"

#include <cmath>

#include <ATen/ATen.h>

namespace qtrain::ops {

at::Tensor causal_attention(const at::Tensor& q,
                            const at::Tensor& k,
                            const at::Tensor& v,
                            std::optional<int64_t> sliding_window,
                            const at::Tensor& segments) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "causal_attention: q, k, v must be [B, heads, T, d]");
  TORCH_CHECK(q.size(1) % k.size(1) == 0,
              "causal_attention: ",
              q.size(1),
              " query heads are not a multiple of ",
              k.size(1),
              " key/value heads");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const int64_t t = q.size(2);
  const bool gqa = q.size(1) != k.size(1);
  const bool windowed = sliding_window && *sliding_window < t;
  if (!windowed && !segments.defined()) {
    // The fused causal kernels (flash / memory-efficient on CUDA) need no mask tensor.
    return at::scaled_dot_product_attention(q,
                                            k,
                                            v,
                                            /*attn_mask=*/std::nullopt,
                                            /*dropout_p=*/0.0,
                                            /*is_causal=*/true,
                                            scale,
                                            /*enable_gqa=*/gqa);
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
  if (gqa && q.is_cuda()) {
    // CUDA's memory-efficient kernel takes a mask but not grouped-query heads, and the math
    // kernel it would otherwise fall back to keeps [B, heads, T, T] float32 probabilities: give
    // every query head its own k and v instead (B x heads x T x d each, far less than T x T).
    const int64_t group = q.size(1) / k.size(1);
    return at::scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), visible, 0.0, false, scale, false);
  }
  return at::scaled_dot_product_attention(q, k, v, visible, 0.0, /*is_causal=*/false, scale, gqa);
}

}  // namespace qtrain::ops
