// 4-bit blockwise quantization (NF4 / FP4), byte-compatible with bitsandbytes 0.50.
//
// See Note [4-bit layout]: the input is read as a flat row-major array of n elements cut into
// blocks of `blocksize` consecutive elements (the last one may be partial); each block keeps its
// absmax (float32), each element a 4-bit code, two codes per byte with the EVEN flat index in
// the HIGH nibble. An odd n pads the last low nibble with the code of 0.0. With double
// quantization the absmax vector itself is stored as 8-bit codes of (absmax - mean) in nested
// blocks of 256 with the signed dynamic map.
//
// CPU quantization reproduces bitsandbytes' CPU backend bit for bit, including its edge cases
// (see Note [Where bitsandbytes' CPU and CUDA quantizers differ] in kbit.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ops/quant/codebook.h"

namespace qtrain::ops {

// Double-quantized absmax ("compress_statistics"): absmax[i] = code[qabsmax[i]] *
// absmax2[i / 256] + offset, in float32.
struct NestedAbsmax {
  at::Tensor qabsmax;  // uint8 [blocks]
  at::Tensor absmax2;  // float32 [ceil(blocks / 256)]
  at::Tensor code;     // float32 [256], the signed dynamic map
  float offset = 0.f;  // mean of the original absmax
  int64_t blocksize = 256;
};

// A quantized tensor: bitsandbytes' packed weight plus its QuantState. Built once, then only
// read: no op writes into it (DESIGN invariant "quantized base weights are immutable").
struct Packed4bit {
  at::Tensor packed;  // uint8 [(n + 1) / 2, 1]
  at::Tensor absmax;  // float32 [blocks]; undefined when `nested` is set
  std::optional<NestedAbsmax> nested;
  QuantType quant_type = QuantType::nf4;
  int64_t blocksize = 64;
  std::vector<int64_t> shape;                    // of the original tensor, e.g. [out, in]
  at::ScalarType dtype = at::ScalarType::Float;  // of the original tensor

  int64_t numel() const;
  int64_t blocks() const;
  // The same quantized tensor with every part on `device` (a copy unless already there).
  Packed4bit to(const at::Device& device) const;
  // Bytes held by the quantized form (packed codes + absmax or nested absmax).
  int64_t nbytes() const;
  // Checks that every tensor has the dtype, size and device the layout requires; the message
  // names `what` (e.g. the checkpoint key) and the mismatch.
  void validate(const std::string& what = "4-bit tensor") const;
};

// Blocksizes bitsandbytes accepts for 4-bit: 32, 64, ..., 4096.
void check_blocksize_4bit(int64_t blocksize);

// x: any shape, float32 / bfloat16 / float16, contiguous, CPU or CUDA.
Packed4bit quantize_4bit(const at::Tensor& x, QuantType type, int64_t blocksize = 64, bool double_quant = false);

// What quantize_4bit(x of `shape` and `dtype`, ...) returns, without the values: every tensor a
// meta tensor of the size and dtype quantize_4bit gives it, and a nested offset of 0: the shape
// of a quantized tensor whose bytes and nested offset come from elsewhere later (another
// process that quantized it).
Packed4bit placeholder_4bit(
    at::IntArrayRef shape, at::ScalarType dtype, QuantType type, int64_t blocksize = 64, bool double_quant = false);

// Returns the tensor in `dtype` (default: the original dtype), shape `q.shape`, on q's device.
at::Tensor dequantize_4bit(const Packed4bit& q, std::optional<at::ScalarType> dtype = std::nullopt);

// The same into a caller's buffer (a reused workspace: no allocation, no first-touch page
// faults). out: contiguous, q.numel() elements of float32/bf16/fp16, on q's device.
void dequantize_4bit_into(const Packed4bit& q, at::Tensor& out);

// The plain scalar loop of the CPU dequantizer, kept beside the vectorized one as its reference
// (tests compare the two bit for bit). CPU tensors only.
at::Tensor dequantize_4bit_scalar(const Packed4bit& q, at::ScalarType dtype);

// The float32 absmax of every block (reconstructs nested absmax).
at::Tensor absmax_float(const Packed4bit& q);

}  // namespace qtrain::ops
