// The frozen base weights of several experts applied to their rows with grouped matrix products
// (at::_grouped_mm: one CUTLASS kernel in bfloat16 on Hopper and data-centre Blackwell, sm_90 and
// sm_100; on other GPUs and dtypes a host sync and a loop of products), with autograd that
// keeps only the experts' stored tensors for backward. See Note [Grouped expert GEMM].
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/model/linear_layer.h"

namespace qtrain::engine::model {

// Note [Grouped expert GEMM]
// The experts that received rows are taken in chunks whose weights, dequantized into the compute
// dtype, fit kGroupedExpertWorkspaceBytes (at least one expert a chunk). Per chunk, forward
// dequantizes each expert once into one [G, out, in] workspace and multiplies every expert's
// block of rows with it in one grouped product; the workspace is freed before the next chunk.
// As for a single quantized linear (Note [Quantized linear autograd]), the autograd node keeps
// the experts' stored tensors (save_for_backward: a buffer overwritten in place before backward
// stops it with autograd's error instead of giving wrong gradients), never the workspace nor the
// rows; backward dequantizes again, chunk by chunk: grad_rows = grad_y W_e per block.
// The gradient flows to the rows only: base weights are frozen.
// For the 26B-A4B in bfloat16 a chunk is 33 experts of gate_up ([1408, 2816], 7.9 MB) or 67 of
// down, so a layer's pass over its 128 experts is 4 + 2 grouped products where the per-expert
// path launches 256 matrix products, each with its own LoRA kernels.
constexpr int64_t kGroupedExpertWorkspaceBytes = int64_t{256} << 20;

// Whether grouped_expert_linear can take `layer` with rows of `dtype`: a dense, 4-bit or int8
// weight whose product is a float matmul with the dequantized weight (int8_compute: dequantize,
// the default; LLM.int8's int8 product with outliers keeps the per-expert path), and both widths
// 16-byte aligned as the grouped kernel needs.
bool groupable(const LinearLayer& layer, at::ScalarType dtype);

// rows: [N, in] with each expert's rows one contiguous block, in the order of `experts`;
// counts: the rows of each expert (all positive, summing to N). Returns [N, out] in rows' dtype,
// differentiable in rows. `workspace_bytes` caps a chunk's dequantized weights (tests make it
// small to exercise the chunking).
at::Tensor grouped_expert_linear(const at::Tensor& rows,
                                 const std::vector<int64_t>& counts,
                                 const std::vector<const LinearLayer*>& experts,
                                 int64_t workspace_bytes = kGroupedExpertWorkspaceBytes);

}  // namespace qtrain::engine::model
