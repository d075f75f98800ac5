// The tensor encodings of GGUF files (ggml's types) that qtrain writes: F32, F16, BF16 and Q8_0,
// byte for byte as llama.cpp's converter and ggml's reference quantizer write them. See Note
// [ggml encodings].
//
// Note [ggml encodings]
// - F16: IEEE half, rounded to nearest even (numpy's astype(float16), ggml's FP32_TO_FP16).
// - BF16 (ggml_compute_fp32_to_bf16): the float's top 16 bits rounded to nearest even on its bit
//   pattern, n + 0x7fff + ((n >> 16) & 1) >> 16; a NaN keeps its sign and top bits and is made
//   quiet (bit 22 set), where torch's cast writes one canonical NaN.
// - Q8_0 (quantize_row_q8_0_ref): blocks of 32 values along a row, each 2 bytes of scale d =
//   max|x| / 127 as F16 and 32 int8 q = roundf(x / d), computed as x * (1 / d) in float32
//   (d = 0: q = 0), roundf rounding halves away from zero.
// Rows are the last dimension; Q8_0 needs it to be a multiple of 32.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

// ggml's type ids as GGUF stores them.
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };

std::string ggml_type_name(GgmlType type);
// Bytes of `elements` values in `type` (for Q8_0 a multiple of 32).
int64_t ggml_nbytes(GgmlType type, int64_t elements);

// `x` (float32, any shape, contiguous or not) encoded as `type`: uint8 [bytes], row-major.
at::Tensor ggml_encode(const at::Tensor& x, GgmlType type);

}  // namespace qtrain::ops
