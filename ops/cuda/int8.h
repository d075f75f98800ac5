// CUDA kernels of LLM.int8() row-wise ("vector-wise") quantization: quantize and dequantize. A
// plain C++ interface (device pointers, sizes, a stream) so nvcc never parses torch headers;
// ops/quant/device_cuda.cpp hands these functions tensors. Bit-exact twins of the CPU code in
// ops/quant/int8.cpp (See Note [Bit-exact CUDA twins] in kbit.cu).
//
// All pointers are device pointers on the current device; all work is queued on `stream`. Errors
// throw std::runtime_error naming the function or kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "ops/cuda/kbit.h"  // Dtype

namespace qtrain::ops::cuda {

// a: [rows, cols] of `dtype`, row-major. Writes q: int8 [rows, cols] and row_absmax: float32
// [rows] (the row absmax itself, bitsandbytes' SCB, not divided by 127). With threshold > 0,
// elements with |a| >= threshold are outliers: left out of the row absmax and written as 0. A row
// whose absmax is 0 is written as 0. Otherwise q = round_half_even(a * ((1 / absmax) * 127)).
// Outlier COLUMNS (zeroed across all rows) are the caller's business.
void int8_vectorwise_quant(const void* a,
                           Dtype dtype,
                           int64_t rows,
                           int64_t cols,
                           float threshold,
                           int8_t* q,
                           float* row_absmax,
                           cudaStream_t stream);

// q: int8 [rows, cols], row_absmax: float32 [rows]. Writes out: float32 [rows, cols],
// out = (q * row_absmax[r]) * fl32(1 / 127), each product rounded to float32.
void int8_vectorwise_dequant(
    const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols, float* out, cudaStream_t stream);

}  // namespace qtrain::ops::cuda
