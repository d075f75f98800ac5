// CUDA kernels of the 4-bit blockwise formats (NF4 / FP4): quantize, dequantize, and the
// reconstruction of a double-quantized absmax. A plain C++ interface (device pointers, sizes, a
// stream), so nvcc never parses torch headers; ops/quant/device_cuda.cpp hands these functions
// tensors. Every function is a bit-exact twin of the CPU code in ops/quant/kbit.cpp (See Note
// [Bit-exact CUDA twins] in kbit.cu), and the layout is ops/quant/kbit.h's Note [4-bit layout]:
// flat row-major elements, blocks of `blocksize`, two codes per byte, EVEN index in the HIGH nibble.
//
// All pointers are device pointers on the current device; all work is queued on `stream`. Errors
// (bad arguments, failed launches) throw std::runtime_error naming the function or kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace qtrain::ops::cuda {

// Element type of a floating-point buffer handed to a kernel.
enum class Dtype : uint8_t { f32, f16, bf16 };

// The quantizer of one 4-bit format (ops/quant/codebook.h, Quantizer4bit): the 16 codes sorted by
// value and the 15 float32 midpoints between neighbours. Passed by value as a kernel parameter.
struct Quantizer4bitTable {
  uint8_t sorted_codes[16];
  float midpoints[15];
};

// Dequantization value of each 4-bit code (ops/quant/codebook.h, dequant_lut_4bit).
struct Codebook4bitTable {
  float values[16];
};

// x: [n] of `dtype`. Writes packed: uint8 [(n + 1) / 2] and absmax: float32 [ceil(n / blocksize)].
// blocksize: a power of two in [32, 4096].
void quantize_4bit(const void* x,
                   Dtype dtype,
                   int64_t n,
                   int blocksize,
                   const Quantizer4bitTable& quantizer,
                   uint8_t* packed,
                   float* absmax,
                   cudaStream_t stream);

// packed: uint8 [(n + 1) / 2], absmax: float32 [ceil(n / blocksize)]. Writes out: [n] of `dtype`,
// out[i] = codebook[code(i)] * absmax[i / blocksize] in float32, rounded to nearest even.
void dequantize_4bit(const uint8_t* packed,
                     const float* absmax,
                     int64_t n,
                     int blocksize,
                     const Codebook4bitTable& codebook,
                     void* out,
                     Dtype dtype,
                     cudaStream_t stream);

// qabsmax: uint8 [n], absmax2: float32 [ceil(n / blocksize)], code: float32 [256] (device).
// Writes out: float32 [n], out[i] = code[qabsmax[i]] * absmax2[i / blocksize] + offset, as two
// separately rounded float32 operations (never a fused multiply-add).
void dequantize_nested_absmax(const uint8_t* qabsmax,
                              const float* absmax2,
                              const float* code,
                              float offset,
                              int64_t n,
                              int64_t blocksize,
                              float* out,
                              cudaStream_t stream);

}  // namespace qtrain::ops::cuda
