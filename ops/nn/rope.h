// Rotary position embeddings in Hugging Face's convention: "rotate_half" over the two halves of
// the head dimension (GPT-NeoX style), not interleaved pairs: transformers'
// `apply_rotary_pos_emb` in modeling_llama.py.
#pragma once

#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

// The frequency scalings qtrain supports (transformers' rope types).
struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | proportional
  double factor = 1.0;
  // proportional (Gemma 4's full layers): the first int(partial_rotary_factor * dim / 2)
  // frequencies as "default" computes them over the whole dim, the others 0 (those dimension
  // pairs are not rotated); all divided by factor.
  double partial_rotary_factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// inv_freq[j] = 1 / theta^(2j / dim), j < dim/2, float32, then scaled by `scaling`
// (transformers' modeling_rope_utils.py: ROPE_INIT_FUNCTIONS).
at::Tensor rope_inv_freq(int64_t dim, double theta, const RopeScaling& scaling);

struct RopeTables {
  at::Tensor cos;  // [T, dim], or [B, 1, T, dim] for per-row positions; in the activation dtype
  at::Tensor sin;
};
// positions: int64 [T], or [B, T] when each row has its own positions (packed samples restart
// at 0). Angles in float32, cos/sin cast to `dtype` (as transformers does).
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype);

// x: [B, heads, T, dim]; tables for the same T. Returns x * cos + rotate_half(x) * sin.
at::Tensor rope_apply(const at::Tensor& x, const RopeTables& tables);

}  // namespace qtrain::ops
