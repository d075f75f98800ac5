// See rope.h.
#include "ops/nn/rope.h"

#include <cmath>

#include <ATen/ATen.h>

namespace qtrain::ops {

at::Tensor rope_inv_freq(int64_t dim, double theta, const RopeScaling& s) {
  TORCH_CHECK(dim > 0 && dim % 2 == 0, "rope: head dimension must be even and positive, got ", dim);
  // transformers: 1 / (theta ** (arange(0, dim, 2, int64).float() / dim)), in float32.
  auto exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  auto inv_freq = 1.0 / at::pow(at::scalar_tensor(theta, at::kFloat), exponent);
  if (s.type == "default") return inv_freq;
  if (s.type == "linear") return inv_freq / s.factor;
  if (s.type == "proportional") {
    // _compute_proportional_rope_parameters: int(p * dim // 2) rotated frequencies, exponents
    // over the full dim, zeros for the rest.
    TORCH_CHECK(s.partial_rotary_factor > 0 && s.partial_rotary_factor <= 1,
                "rope: partial_rotary_factor must be in (0, 1], got ",
                s.partial_rotary_factor);
    const auto rotated = static_cast<int64_t>(std::floor(s.partial_rotary_factor * static_cast<double>(dim) / 2));
    return at::cat({inv_freq.narrow(0, 0, rotated), at::zeros({dim / 2 - rotated}, inv_freq.options())}) / s.factor;
  }
  TORCH_CHECK(s.type == "llama3",
              "rope_scaling type '",
              s.type,
              "' is not supported; supported types are default, linear, llama3 and proportional");
  // transformers' _compute_llama3_parameters.
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_wl = old_ctx / s.low_freq_factor;
  const double high_wl = old_ctx / s.high_freq_factor;
  auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = at::where(wavelen > low_wl, inv_freq / s.factor, inv_freq);
  auto smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto is_medium = (wavelen >= high_wl).logical_and(wavelen <= low_wl);
  return at::where(is_medium, smoothed, scaled);
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype) {
  // freqs[t, j] = pos[t] * inv_freq[j] (float32 outer product), emb = cat(freqs, freqs).
  TORCH_CHECK(
      positions.dim() == 1 || positions.dim() == 2, "rope: positions must be [T] or [B, T], got ", positions.sizes());
  auto freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.to(positions.device());
  auto emb = at::cat({freqs, freqs}, -1);
  if (positions.dim() == 2) emb = emb.unsqueeze(1);  // [B, 1, T, dim]: broadcast over heads
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor rope_apply(const at::Tensor& x, const RopeTables& t) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * t.cos + rotated * t.sin;
}

}  // namespace qtrain::ops
