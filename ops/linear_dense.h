// y = x W^T + b for a weight held in a float dtype: at::linear, except for the few rows of a
// decoding step on the CPU. See Note [Decoding products on the CPU].
//
// Note [Decoding products on the CPU]
// A decoding step multiplies one row (or a few, one per prompt of a batch) by every weight of the
// model: its time is the time to read the weights. libtorch's CPU product of a single row (MKL's
// sgemm/sgemv through at::linear) runs on one thread and reads about 16 GB/s on the 2-core CI
// machine, where one thread's sum reads 35 GB/s and two 43 GB/s (bench/generate_speed.py's
// machine; measured with torch in the venv). Without autograd, up to kMaxRows rows on the CPU and
// a weight of at least kMinElements, the output features are split into one block per thread
// (at::parallel_for), each block the same at::linear of its rows of W: every output element is
// the same dot product over the same inputs, computed by the same kernel on a smaller matrix.
// Training (autograd on) and larger batches are at::linear unchanged.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

inline constexpr int64_t kMaxRows = 16;
inline constexpr int64_t kMinElements = 1 << 18;

// x: [..., in]; weight: [out, in] in x's dtype; bias: [out] or none. Returns [..., out].
at::Tensor linear_dense(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias);

}  // namespace qtrain::ops
