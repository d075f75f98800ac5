// 8-bit blockwise quantization with a 256-entry code, as bitsandbytes' CPU backend does it: the
// nested (double-quantized) absmax of 4-bit weights, and the state of 8-bit optimizers.
//
// A flat array of n elements is cut into blocks of `blocksize` consecutive elements (the last one
// may be partial); each block keeps its absmax (float32) and each element one byte, the index of
// a code value. Dequantization is code[byte] * absmax (one float32 multiply). Quantization scales
// by the IEEE reciprocal of the absmax and looks the code up through bitsandbytes' 65536-bin grid
// over [-1, 1]: see Note [The 8-bit grid quantizer] in blockwise_8bit.cpp.
#pragma once

#include <array>
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

struct Blockwise8bit {
  at::Tensor codes;   // uint8, same shape as x
  at::Tensor absmax;  // float32 [ceil(n / blocksize)]
};

// x: float32, contiguous, CPU.
Blockwise8bit quantize_blockwise_8bit(const at::Tensor& x, const std::array<float, 256>& code, int64_t blocksize);

// The same into existing tensors: codes uint8 and absmax float32 [ceil(n / blocksize)], all
// contiguous and on x's device (any device: the CPU runs a loop over blocks, other devices the
// same arithmetic as ATen ops; the two agree bit for bit).
void quantize_blockwise_8bit_into(
    const at::Tensor& x, const std::array<float, 256>& code, int64_t blocksize, at::Tensor& codes, at::Tensor& absmax);

// out[i] = code[codes[i]] * absmax[i / blocksize], float32, the shape of `codes`.
at::Tensor dequantize_blockwise_8bit(const at::Tensor& codes,
                                     const at::Tensor& absmax,
                                     const at::Tensor& code,
                                     int64_t blocksize);

// The same into `out` (float32, contiguous, codes.numel() elements), on any device.
void dequantize_blockwise_8bit_into(
    const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out);

// The plain ATen-op forms that non-CPU devices run, exposed so that tests compare them with the
// CPU loops bit for bit. Any device; the arguments as for the *_into functions (unchecked here
// for dequantization).
void quantize_blockwise_8bit_aten(
    const at::Tensor& x, const std::array<float, 256>& code, int64_t blocksize, at::Tensor& codes, at::Tensor& absmax);
void dequantize_blockwise_8bit_aten(
    const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out);

// Bytes that n elements take in this form: one code each plus a float32 absmax per block.
int64_t blockwise_8bit_nbytes(int64_t n, int64_t blocksize);

// bitsandbytes' 8-bit optimizers keep their state in blocks of 256, and tensors of fewer than
// min_8bit_size = 4096 elements keep float32 state instead.
constexpr int64_t kOptimizerStateBlocksize = 256;
constexpr int64_t kOptimizerMin8bitNumel = 4096;
// Bytes of Adam's two moments of an n-element tensor as those optimizers hold them.
int64_t adam_8bit_moments_nbytes(int64_t n);

}  // namespace qtrain::ops
