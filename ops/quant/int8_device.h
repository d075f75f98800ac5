// The CUDA half of the INT8 ops (int8_cuda.cpp, or int8_nocuda.cpp without CUDA). Callers have
// validated their arguments.
#pragma once

#include <ATen/core/Tensor.h>

namespace qtrain::ops::device {

// a: contiguous [rows, cols] float32/bf16/fp16 on CUDA. Writes q (int8 [rows, cols]) and
// row_absmax (float32 [rows]). Elements with |a| >= threshold (threshold > 0) are left out of the
// row absmax and written as 0. Zero rows give 0.
void int8_vectorwise_quant(const at::Tensor& a, float threshold, at::Tensor& q, at::Tensor& row_absmax);
// out (float32 [rows, cols]) = q * row_absmax[r] * (1/127 as float32).
void int8_vectorwise_dequant(const at::Tensor& q, const at::Tensor& row_absmax, at::Tensor& out);

}  // namespace qtrain::ops::device
