// The CUDA half of the k-bit ops, behind a torch-level interface. device_cuda.cpp implements it
// with the kernels of ops/cuda; device_nocuda.cpp, linked when qtrain is built without CUDA,
// fails with a message that says so. Callers have already validated their arguments.
#pragma once

#include <ATen/core/Tensor.h>

#include "ops/quant/kbit.h"

namespace qtrain::ops::device {

// x: contiguous float32/bf16/fp16 on a CUDA device. Fills packed (uint8 [(n+1)/2]) and absmax.
void quantize_4bit(const at::Tensor& x, QuantType type, int64_t blocksize, at::Tensor& packed, at::Tensor& absmax);
// out: contiguous float32/bf16/fp16 of numel n; absmax: float32 [blocks].
void dequantize_4bit(
    const at::Tensor& packed, const at::Tensor& absmax, QuantType type, int64_t blocksize, at::Tensor& out);
// absmax[i] = code[qabsmax[i]] * absmax2[i / blocksize] + offset.
at::Tensor dequantize_nested_absmax(const NestedAbsmax& nested);

}  // namespace qtrain::ops::device
