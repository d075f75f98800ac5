// LLM.int8() vector-wise quantization, as bitsandbytes does it.
//
// Each row r of a [rows, cols] matrix is scaled by 127 / absmax(row r) and rounded (half to
// even) to int8. For weights the int8 matrix is `CB` and the float32 row absmax is `SCB`: SCB
// is the absmax itself, not absmax/127, and it cannot be recovered from CB (every non-zero row
// of CB reaches +-127). With a threshold > 0 (activations), elements with |a| >= threshold are
// outliers: they are left out of the row absmax, and the columns that hold any are zeroed in
// the int8 result and computed in floating point instead (the mixed-precision decomposition).
#pragma once

#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace qtrain::ops {

struct Int8Rowwise {
  at::Tensor q;             // int8, shape of the input
  at::Tensor row_absmax;    // float32 [rows]
  at::Tensor outlier_cols;  // int64 [k] (empty without outliers); undefined when threshold == 0
};

// a: [..., cols] float32 / bfloat16 / float16, contiguous, CPU or CUDA. Rows are all leading dims.
Int8Rowwise int8_vectorwise_quant(const at::Tensor& a, double threshold = 0.0);
// q * row_absmax / 127 in float32 (bitsandbytes' int8_vectorwise_dequant).
at::Tensor int8_vectorwise_dequant(const at::Tensor& q, const at::Tensor& row_absmax);

// A frozen LLM.int8() weight [out, in]. Built once (from float weights, or from a checkpoint's
// CB and SCB) and never mutated afterwards; every forward and every recompute reads the same
// CB/SCB. See Note [SCB is never guessed].
class Int8Weight {
 public:
  // Quantizes like bitsandbytes' Int8Params: the weight is rounded to float16 first.
  static Int8Weight from_float(const at::Tensor& weight);
  // From stored state. `scb` missing is an error naming `what`: it is never guessed from CB.
  static Int8Weight from_quantized(const at::Tensor& cb, const std::optional<at::Tensor>& scb, const std::string& what);
  // The shapes from_float gives a weight [out, in], as meta tensors without values (for a layer
  // another rank reads; its CB and SCB arrive later).
  static Int8Weight placeholder(int64_t out_features, int64_t in_features);

  const at::Tensor& cb() const { return cb_; }
  const at::Tensor& scb() const { return scb_; }
  int64_t out_features() const { return cb_.size(0); }
  int64_t in_features() const { return cb_.size(1); }
  int64_t nbytes() const { return cb_.nbytes() + scb_.nbytes(); }
  Int8Weight to(const at::Device& device) const;

  // CB * (SCB / 127) rounded to `dtype`: bitsandbytes' MatMul8bitFp weight.
  at::Tensor dequantize(at::ScalarType dtype) const;

 private:
  Int8Weight(at::Tensor cb, at::Tensor scb) : cb_(std::move(cb)), scb_(std::move(scb)) {}
  at::Tensor cb_;   // int8 [out, in]
  at::Tensor scb_;  // float32 [out], row absmax
};

// LLM.int8() matmul x @ W^T (+ bias): x (rounded to float16, as bitsandbytes does) is quantized
// row-wise with `threshold`, the int8 product
// is accumulated exactly and rescaled by SCA * SCB / 127^2, and the outlier columns of x are
// multiplied in x's dtype with the dequantized weight columns. x: [..., in]. Returns [..., out]
// in x's dtype.
at::Tensor int8_mixed_matmul(const at::Tensor& x,
                             const Int8Weight& w,
                             const std::optional<at::Tensor>& bias,
                             double threshold);

}  // namespace qtrain::ops
