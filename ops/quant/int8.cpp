// LLM.int8() vector-wise quantization on the CPU, dispatch to CUDA, Int8Weight; see int8.h.
#include "ops/quant/int8.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ops/quant/int8_device.h"
#include "ops/quant/simd_x86.h"

namespace qtrain::ops {

// Note [SCB is never guessed]
// SCB, the float32 row absmax of an int8 weight, is part of the weight: without it the int8
// codes mean nothing. A proposed upstream fallback, SCB = amax(|CB|) / 127, is wrong: every
// non-zero row of CB reaches +-127 by construction, so it gives 1.0 for every row. An
// Int8Weight therefore always holds both halves; building one from CB alone is an error, and
// the engine rebuilds a missing SCB only from the original float weights.

namespace {

constexpr float kInv127 = 1.0f / 127.0f;  // bitsandbytes' 7.874015718698502e-3 as float32

template <typename T>
void int8_quant_rows_cpu(const T* a, int64_t rows, int64_t cols, float threshold, int8_t* q, float* row_absmax) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* in = a + r * cols;
      int8_t* out = q + r * cols;
      float amax = 0.f;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = std::fabs(static_cast<float>(in[c]));
        if (threshold > 0.f && v >= threshold) continue;
        amax = std::max(amax, v);
      }
      row_absmax[r] = amax;
      if (amax == 0.f) {
        std::fill(out, out + cols, 0);
        continue;
      }
      // bitsandbytes: round(a * (reciprocal(absmax) * 127)), half to even, in float32.
      const float scale = (1.0f / amax) * 127.0f;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = static_cast<float>(in[c]);
        const bool outlier = threshold > 0.f && std::fabs(v) >= threshold;
        out[c] = outlier ? int8_t{0} : static_cast<int8_t>(std::nearbyint(v * scale));
      }
    }
  });
}

void check_int8_input(const at::Tensor& a, const char* name) {
  TORCH_CHECK(a.defined() && a.numel() > 0, name, " is empty or undefined");
  TORCH_CHECK(a.dim() >= 1, name, " must have at least one dimension");
  auto t = a.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
              name,
              " has dtype ",
              t,
              "; accepted dtypes are float32, bfloat16 and float16");
  TORCH_CHECK(a.is_contiguous(), name, " is not contiguous (strides ", a.strides(), "); call .contiguous() first");
}

}  // namespace

Int8Rowwise int8_vectorwise_quant(const at::Tensor& a, double threshold) {
  check_int8_input(a, "int8_vectorwise_quant: a");
  TORCH_CHECK(threshold >= 0.0 && std::isfinite(threshold),
              "int8_vectorwise_quant: threshold must be finite and >= 0, got ",
              threshold);
  const int64_t cols = a.size(-1);
  const int64_t rows = a.numel() / cols;
  Int8Rowwise r;
  r.q = at::empty(a.sizes(), a.options().dtype(at::kChar));
  r.row_absmax = at::empty({rows}, a.options().dtype(at::kFloat));
  const auto thr = static_cast<float>(threshold);
  if (a.is_cuda()) {
    auto q2 = r.q.view({rows, cols});
    device::int8_vectorwise_quant(a.view({rows, cols}), thr, q2, r.row_absmax);
  } else {
    TORCH_CHECK(a.device().is_cpu(), "int8_vectorwise_quant: a is on ", a.device(), "; supported: CPU, CUDA");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, a.scalar_type(), "int8_vectorwise_quant", [&] {
      int8_quant_rows_cpu<scalar_t>(
          a.const_data_ptr<scalar_t>(), rows, cols, thr, r.q.data_ptr<int8_t>(), r.row_absmax.data_ptr<float>());
    });
  }
  if (threshold > 0.0) {
    auto a2 = a.view({rows, cols});
    r.outlier_cols = (a2.abs() >= threshold).any(0).nonzero().view({-1});
    // Like bitsandbytes: with more than one row the whole outlier columns leave the int8 part.
    if (rows > 1 && r.outlier_cols.numel() > 0) r.q.view({rows, cols}).index_fill_(1, r.outlier_cols, 0);
  }
  return r;
}

at::Tensor int8_vectorwise_dequant(const at::Tensor& q, const at::Tensor& row_absmax) {
  TORCH_CHECK(q.scalar_type() == at::kChar, "int8_vectorwise_dequant: q must be int8, got ", q.scalar_type());
  TORCH_CHECK(row_absmax.scalar_type() == at::kFloat,
              "int8_vectorwise_dequant: row_absmax must be float32, got ",
              row_absmax.scalar_type());
  const int64_t cols = q.size(-1);
  const int64_t rows = q.numel() / cols;
  TORCH_CHECK(row_absmax.numel() == rows,
              "int8_vectorwise_dequant: row_absmax has ",
              row_absmax.numel(),
              " entries for ",
              rows,
              " rows");
  if (q.is_cuda()) {
    auto out = at::empty({rows, cols}, q.options().dtype(at::kFloat));
    device::int8_vectorwise_dequant(q.contiguous().view({rows, cols}), row_absmax.contiguous(), out);
    return out.view(q.sizes());
  }
  return (q.view({rows, cols}) * row_absmax.view({rows, 1})).mul_(kInv127).view(q.sizes());
}

Int8Weight Int8Weight::from_float(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2, "Int8Weight: weight must be 2-D [out, in], got shape ", weight.sizes());
  check_int8_input(weight, "Int8Weight: weight");
  auto r = int8_vectorwise_quant(weight.to(at::kHalf).contiguous(), 0.0);
  return Int8Weight(r.q, r.row_absmax);
}

Int8Weight Int8Weight::from_quantized(const at::Tensor& cb,
                                      const std::optional<at::Tensor>& scb,
                                      const std::string& what) {
  TORCH_CHECK(cb.defined() && cb.dim() == 2 && cb.scalar_type() == at::kChar,
              what,
              ": int8 weight (CB) must be int8 [out, in], got ",
              cb.defined() ? c10::toString(cb.scalar_type()) : "undefined",
              " ",
              cb.defined() ? cb.sizes() : at::IntArrayRef{});
  TORCH_CHECK(scb.has_value() && scb->defined(),
              what,
              ": int8 weight has no SCB (row absmax). SCB cannot be recovered from the int8 codes "
              "(See Note [SCB is never guessed]); load the checkpoint's '.SCB' tensor, or quantize from the original "
              "float weights");
  TORCH_CHECK(scb->scalar_type() == at::kFloat && scb->numel() == cb.size(0),
              what,
              ": SCB must be float32 [",
              cb.size(0),
              "], got ",
              scb->scalar_type(),
              " ",
              scb->sizes());
  TORCH_CHECK(scb->device() == cb.device(), what, ": SCB is on ", scb->device(), " but CB is on ", cb.device());
  return Int8Weight(cb.contiguous(), scb->reshape({-1}).contiguous());
}

Int8Weight Int8Weight::placeholder(int64_t out_features, int64_t in_features) {
  const auto meta = at::TensorOptions().device(at::kMeta);
  return Int8Weight(at::empty({out_features, in_features}, meta.dtype(at::kChar)),
                    at::empty({out_features}, meta.dtype(at::kFloat)));
}

Int8Weight Int8Weight::to(const at::Device& device) const {
  return Int8Weight(cb_.to(device), scb_.to(device));
}

at::Tensor Int8Weight::dequantize(at::ScalarType dtype) const {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "Int8Weight::dequantize: dtype ",
              dtype,
              " is not supported; accepted: float32, bfloat16, float16");
  // CB * (SCB * (1/127)): the scale is float32, the product rounds once to dtype.
  const auto scale = scb_ * kInv127;
  if (cb_.is_cuda() || !simd::cpu_has_avx2()) return (cb_.to(at::kFloat) * scale.unsqueeze(1)).to(dtype);
  auto out = at::empty(cb_.sizes(), cb_.options().dtype(dtype));
  const auto type = dtype == at::kFloat      ? simd::OutType::f32
                    : dtype == at::kBFloat16 ? simd::OutType::bf16
                                             : simd::OutType::f16;
  const int64_t rows = out_features(), cols = in_features();
  const int8_t* q = cb_.const_data_ptr<int8_t>();
  const float* s = scale.const_data_ptr<float>();
  auto* o = static_cast<char*>(out.data_ptr());
  const auto esize = static_cast<int64_t>(out.element_size());
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) simd::dequant_int8_run(q + r * cols, cols, s[r], o + r * cols * esize, type);
  });
  return out;
}

at::Tensor int8_mixed_matmul(const at::Tensor& x,
                             const Int8Weight& w,
                             const std::optional<at::Tensor>& bias,
                             double threshold) {
  TORCH_CHECK(x.size(-1) == w.in_features(),
              "int8_mixed_matmul: x has ",
              x.size(-1),
              " features but the weight expects ",
              w.in_features());
  const auto out_shape = [&] {
    auto s = x.sizes().vec();
    s.back() = w.out_features();
    return s;
  }();
  auto x2 = x.reshape({-1, x.size(-1)}).contiguous();
  // Like bitsandbytes' MatMul8bitLt, the activations are quantized from their float16 rounding.
  // A value beyond float16's range becomes inf, which is an outlier (computed from x itself).
  auto qa = int8_vectorwise_quant(x2.to(at::kHalf), threshold);
  // The int8 product is an exact integer: accumulate in float64 (exact to 2^53) on the CPU, or
  // int32 on CUDA (cuBLASLt's int8 GEMM) where its shape rules allow.
  at::Tensor acc;
  const bool int_mm = x2.is_cuda() && x2.size(0) > 16 && x2.size(1) % 8 == 0 && w.out_features() % 8 == 0;
  if (int_mm) {
    acc = at::_int_mm(qa.q, w.cb().t()).to(at::kFloat);
  } else {
    auto wide = x2.is_cuda() ? at::kFloat : at::kDouble;
    acc = at::matmul(qa.q.to(wide), w.cb().to(wide).t()).to(at::kFloat);
  }
  // C * (SCA * SCB) / 127^2 in float32.
  auto out = acc.mul_(qa.row_absmax.unsqueeze(1) * w.scb().unsqueeze(0)).mul_(1.0f / 16129.0f);
  if (bias && bias->defined()) out.add_(bias->to(at::kFloat));
  out = out.to(x.scalar_type());
  if (qa.outlier_cols.defined() && qa.outlier_cols.numel() > 0) {
    auto sub_x = x2.index_select(1, qa.outlier_cols);
    auto sub_w = int8_vectorwise_dequant(w.cb().index_select(1, qa.outlier_cols).contiguous(), w.scb());
    out.addmm_(sub_x, sub_w.to(x.scalar_type()).t());
  }
  return out.view(out_shape);
}

}  // namespace qtrain::ops
