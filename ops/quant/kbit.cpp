// 4-bit blockwise quantization on the CPU, and the dispatch to CUDA; see kbit.h.
#include "ops/quant/kbit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ops/quant/blockwise_8bit.h"
#include "ops/quant/kbit_device.h"
#include "ops/quant/simd_x86.h"

namespace qtrain::ops {

// Note [Where bitsandbytes' CPU and CUDA quantizers differ]
// qtrain reproduces bitsandbytes' CPU backend (the oracle our parity tests can run), and its
// CUDA kernels reproduce qtrain's CPU code bit for bit. The two bitsandbytes paths differ in:
//  - the reciprocal: CPU multiplies by the IEEE 1/absmax (absmax clamped to >= 1e-38), except
//    in a partial last block, which it divides by absmax (and stores the clamped absmax);
//    CUDA multiplies by a fast-math reciprocal. Values within an ulp of a threshold can get
//    neighbouring codes.
//  - all-zero blocks: CPU scales them to 0.0 and stores the code of zero (NF4 byte 0x77),
//    CUDA computes 0*inf = NaN and stores code 0 (byte 0x00). Both decode to 0 because the
//    absmax is 0, so the weights are the same; only the bytes differ.
//  - FP4 thresholds: CPU uses exact float32 midpoints of the normalised table; CUDA uses
//    rounded literals (e.g. 0.583333 vs 0.5833334). A scaled value between the two gets a
//    neighbouring code.
//  - FP4 near zero: CPU codes tiny negatives as +0 (code 0) and tiny positives as -0 (code 8),
//    the order torch.argsort gives the two zeros; CUDA codes by sign. Both decode to 0.
//  - nested absmax: CPU quantizes through a 65536-bin grid over [-1, 1] (not the exact
//    nearest code), CUDA by exact nearest search. The stored absmax then differs by a code.
// Any qtrain file loads in bitsandbytes unchanged and vice versa; these choices only decide
// which bytes a fresh quantization writes.

namespace {

constexpr float kMinAbsmax = 1e-38f;  // bitsandbytes clamps absmax before its reciprocal

void check_float_input(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.defined(), name, " is an undefined tensor");
  TORCH_CHECK(x.numel() > 0, name, " is empty (shape ", x.sizes(), "): nothing to quantize");
  auto t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
              name,
              " has dtype ",
              t,
              "; accepted dtypes are float32, bfloat16 and float16");
  TORCH_CHECK(x.is_contiguous(),
              name,
              " is not contiguous (shape ",
              x.sizes(),
              ", strides ",
              x.strides(),
              "); call .contiguous() first");
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Sorted index of x: the number of midpoints strictly below it (torch.bucketize, right=False).
inline uint8_t code_4bit(float x, const Quantizer4bit& q) {
  int idx = 0;
  for (int i = 0; i < 15; ++i) idx += q.midpoints[i] < x;
  return q.sorted_codes[idx];
}

inline float clamp_unit(float v) {
  // torch.clamp propagates NaN; std::clamp would too, but be explicit.
  return std::isnan(v) ? v : std::min(1.0f, std::max(-1.0f, v));
}

template <typename T>
void quantize_4bit_cpu(
    const T* x, int64_t n, int64_t blocksize, const Quantizer4bit& q, uint8_t* packed, float* absmax) {
  const int64_t nblocks = ceil_div(n, blocksize);
  const bool partial_last = n % blocksize != 0;
  const uint8_t zero_code = code_4bit(0.0f, q);
  at::parallel_for(0, nblocks, 16, [&](int64_t b0, int64_t b1) {
    std::vector<uint8_t> codes(blocksize + 1);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t start = b * blocksize;
      const int64_t len = std::min(blocksize, n - start);
      float amax = 0.f;
      for (int64_t i = 0; i < len; ++i) {
        float a = std::fabs(static_cast<float>(x[start + i]));
        amax = (std::isnan(a) || a > amax) ? a : amax;
      }
      if (partial_last && b == nblocks - 1) {
        // bitsandbytes divides the partial block by its clamped absmax, and stores the clamped value.
        const float am = std::max(amax, kMinAbsmax);
        absmax[b] = std::isnan(amax) ? amax : am;
        for (int64_t i = 0; i < len; ++i) codes[i] = code_4bit(clamp_unit(static_cast<float>(x[start + i]) / am), q);
      } else {
        const float inv = 1.0f / (std::isnan(amax) ? amax : std::max(amax, kMinAbsmax));
        absmax[b] = amax;
        for (int64_t i = 0; i < len; ++i) codes[i] = code_4bit(clamp_unit(static_cast<float>(x[start + i]) * inv), q);
      }
      // The padding nibble of an odd n is the code of 0.0 (bitsandbytes pads the scaled values).
      codes[len] = zero_code;
      // Blocksizes are even, so every block starts on a byte boundary.
      uint8_t* out = packed + start / 2;
      for (int64_t i = 0; i < (len + 1) / 2; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] << 4 | codes[2 * i + 1]);
    }
  });
}

// Pairs of decoded values per packed byte: high nibble (even index) first.
struct PairTable {
  alignas(64) float v[256][2];
};
PairTable make_pair_table(QuantType type) {
  const auto& code = dequant_lut_4bit(type);
  PairTable t{};
  for (int b = 0; b < 256; ++b) {
    t.v[b][0] = code[b >> 4];
    t.v[b][1] = code[b & 15];
  }
  return t;
}
const PairTable& pair_table(QuantType type) {
  static const PairTable nf4 = make_pair_table(QuantType::nf4);
  static const PairTable fp4 = make_pair_table(QuantType::fp4);
  return type == QuantType::nf4 ? nf4 : fp4;
}

template <typename T>
constexpr simd::OutType simd_out_type() {
  if constexpr (std::is_same_v<T, float>) return simd::OutType::f32;
  if constexpr (std::is_same_v<T, c10::BFloat16>) return simd::OutType::bf16;
  return simd::OutType::f16;
}

// The scalar loop is the reference; the AVX2 loop (simd_x86.cpp) must give the same bits.
template <typename T>
void dequantize_4bit_cpu(const uint8_t* packed,
                         const float* absmax,
                         int64_t n,
                         int64_t blocksize,
                         QuantType type,
                         T* out,
                         bool allow_simd = true) {
  const PairTable& table = pair_table(type);
  const float* lut = dequant_lut_4bit(type).data();
  const bool simd = allow_simd && simd::cpu_has_avx2();
  const int64_t nblocks = ceil_div(n, blocksize);
  // ~64 KiB of output per task keeps the split fine enough for 2..64 threads.
  const int64_t grain = std::max<int64_t>(1, 16384 / blocksize);
  at::parallel_for(0, nblocks, grain, [&](int64_t b0, int64_t b1) {
    if (simd) {
      // Full blocks in one vectorized call; a partial last block goes through the loop below.
      const int64_t full_end = std::min(b1, n / blocksize);
      if (full_end > b0) {
        simd::dequant_4bit_blocks(packed + b0 * blocksize / 2,
                                  absmax + b0,
                                  full_end - b0,
                                  blocksize,
                                  lut,
                                  out + b0 * blocksize,
                                  simd_out_type<T>());
      }
      b0 = std::max(b0, full_end);
    }
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t start = b * blocksize;
      const int64_t len = std::min(blocksize, n - start);
      const float scale = absmax[b];
      const uint8_t* in = packed + start / 2;
      T* o = out + start;
      int64_t done = 0;
      if (simd) {
        done = len / 16 * 16;
        simd::dequant_4bit_run(in, done, lut, scale, o, simd_out_type<T>());
      }
      for (int64_t i = done; i < len; ++i) {
        // One float32 multiply, then round to the output type: bitsandbytes' arithmetic.
        o[i] = static_cast<T>(table.v[in[i / 2]][i % 2] * scale);
      }
    }
  });
}

template <typename F>
void dispatch_float(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat:
      return f(float{});
    case at::kBFloat16:
      return f(c10::BFloat16{});
    case at::kHalf:
      return f(c10::Half{});
    default:
      TORCH_CHECK(false, "unsupported dtype ", t, "; accepted dtypes are float32, bfloat16 and float16");
  }
}

}  // namespace

void check_blocksize_4bit(int64_t blocksize) {
  TORCH_CHECK(blocksize >= 32 && blocksize <= 4096 && (blocksize & (blocksize - 1)) == 0,
              "blocksize ",
              blocksize,
              " is not supported; accepted 4-bit blocksizes are 32, 64, 128, 256, 512, 1024, 2048, 4096");
}

int64_t Packed4bit::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

int64_t Packed4bit::blocks() const {
  return ceil_div(numel(), blocksize);
}

Packed4bit Packed4bit::to(const at::Device& device) const {
  Packed4bit q = *this;
  q.packed = packed.to(device);
  if (nested) {
    q.nested->qabsmax = nested->qabsmax.to(device);
    q.nested->absmax2 = nested->absmax2.to(device);
    q.nested->code = nested->code.to(device);
  } else {
    q.absmax = absmax.to(device);
  }
  return q;
}

int64_t Packed4bit::nbytes() const {
  int64_t bytes = packed.nbytes();
  if (nested) {
    bytes += nested->qabsmax.nbytes() + nested->absmax2.nbytes() + nested->code.nbytes();
  } else {
    bytes += absmax.nbytes();
  }
  return bytes;
}

void Packed4bit::validate(const std::string& what) const {
  check_blocksize_4bit(blocksize);
  TORCH_CHECK(!shape.empty() && numel() > 0, what, ": empty shape");
  const int64_t n = numel();
  TORCH_CHECK(packed.defined() && packed.scalar_type() == at::kByte,
              what,
              ": packed codes must be uint8, got ",
              packed.defined() ? c10::toString(packed.scalar_type()) : "undefined");
  TORCH_CHECK(packed.numel() == (n + 1) / 2,
              what,
              ": packed codes have ",
              packed.numel(),
              " bytes but shape ",
              at::IntArrayRef(shape),
              " needs ",
              (n + 1) / 2);
  TORCH_CHECK(packed.is_contiguous(), what, ": packed codes are not contiguous");
  const int64_t nb = blocks();
  if (nested) {
    const auto& s = *nested;
    TORCH_CHECK(!absmax.defined(), what, ": has both a plain and a nested absmax");
    TORCH_CHECK(
        s.blocksize == 256, what, ": nested blocksize ", s.blocksize, " is not supported; bitsandbytes uses 256");
    TORCH_CHECK(s.qabsmax.scalar_type() == at::kByte && s.qabsmax.numel() == nb,
                what,
                ": nested absmax codes must be uint8 [",
                nb,
                "], got ",
                s.qabsmax.scalar_type(),
                " ",
                s.qabsmax.sizes());
    TORCH_CHECK(s.absmax2.scalar_type() == at::kFloat && s.absmax2.numel() == ceil_div(nb, 256),
                what,
                ": nested_absmax must be float32 [",
                ceil_div(nb, 256),
                "], got ",
                s.absmax2.scalar_type(),
                " ",
                s.absmax2.sizes());
    TORCH_CHECK(s.code.scalar_type() == at::kFloat && s.code.numel() == 256,
                what,
                ": nested_quant_map must be float32 [256], got ",
                s.code.scalar_type(),
                " ",
                s.code.sizes());
    TORCH_CHECK(s.qabsmax.device() == packed.device() && s.absmax2.device() == packed.device() &&
                    s.code.device() == packed.device(),
                what,
                ": nested absmax tensors are not on the device of the packed codes (",
                packed.device(),
                ")");
  } else {
    TORCH_CHECK(absmax.defined() && absmax.scalar_type() == at::kFloat && absmax.numel() == nb,
                what,
                ": absmax must be float32 [",
                nb,
                "] for ",
                n,
                " elements in blocks of ",
                blocksize,
                ", got ",
                absmax.defined() ? c10::toString(absmax.scalar_type()) : "undefined",
                " ",
                absmax.defined() ? absmax.sizes() : at::IntArrayRef{});
    TORCH_CHECK(absmax.device() == packed.device(),
                what,
                ": absmax is on ",
                absmax.device(),
                " but the packed codes are on ",
                packed.device());
  }
}

Packed4bit placeholder_4bit(
    at::IntArrayRef shape, at::ScalarType dtype, QuantType type, int64_t blocksize, bool double_quant) {
  check_blocksize_4bit(blocksize);
  const auto meta = at::TensorOptions().device(at::kMeta);
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  Packed4bit q;
  q.quant_type = type;
  q.blocksize = blocksize;
  q.shape = shape.vec();
  q.dtype = dtype;
  q.packed = at::empty({(n + 1) / 2, 1}, meta.dtype(at::kByte));
  const int64_t blocks = ceil_div(n, blocksize);
  if (!double_quant) {
    q.absmax = at::empty({blocks}, meta.dtype(at::kFloat));
    return q;
  }
  NestedAbsmax nested;  // as quantize_4bit's double quantization lays it out
  nested.qabsmax = at::empty({blocks}, meta.dtype(at::kByte));
  nested.absmax2 = at::empty({ceil_div(blocks, nested.blocksize)}, meta.dtype(at::kFloat));
  nested.code = at::empty({256}, meta.dtype(at::kFloat));
  q.nested = std::move(nested);
  return q;
}

Packed4bit quantize_4bit(const at::Tensor& x, QuantType type, int64_t blocksize, bool double_quant) {
  check_float_input(x, "quantize_4bit: x");
  check_blocksize_4bit(blocksize);
  const int64_t n = x.numel();
  Packed4bit q;
  q.quant_type = type;
  q.blocksize = blocksize;
  q.shape = x.sizes().vec();
  q.dtype = x.scalar_type();
  q.packed = at::empty({(n + 1) / 2, 1}, x.options().dtype(at::kByte));
  at::Tensor absmax = at::empty({ceil_div(n, blocksize)}, x.options().dtype(at::kFloat));
  if (x.is_cuda()) {
    device::quantize_4bit(x, type, blocksize, q.packed, absmax);
  } else {
    TORCH_CHECK(x.device().is_cpu(), "quantize_4bit: x is on ", x.device(), "; supported devices are CPU and CUDA");
    dispatch_float(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      quantize_4bit_cpu<T>(x.const_data_ptr<T>(),
                           n,
                           blocksize,
                           quantizer_4bit(type),
                           q.packed.data_ptr<uint8_t>(),
                           absmax.data_ptr<float>());
    });
  }
  if (!double_quant) {
    q.absmax = absmax;
    return q;
  }
  // Double quantization, as bitsandbytes' quantize_4bit(compress_statistics=True) does it on the
  // CPU: offset = mean, then 8-bit blockwise codes of (absmax - offset) in blocks of 256. The
  // mean is torch's own reduction so the float32 offset is the same bits. Always computed on the
  // CPU: the vector is small (one float per block).
  auto absmax_cpu = absmax.cpu();
  auto offset = absmax_cpu.mean();
  auto centred = (absmax_cpu - offset).contiguous();
  const auto& map = dynamic_map_signed();
  auto b8 = quantize_blockwise_8bit(centred, map, 256);
  NestedAbsmax nested;
  nested.qabsmax = b8.codes.to(x.device());
  nested.absmax2 = b8.absmax.to(x.device());
  nested.code = at::from_blob(const_cast<float*>(map.data()), {256}, at::kFloat).clone().to(x.device());
  nested.offset = offset.item<float>();
  q.nested = std::move(nested);
  return q;
}

at::Tensor absmax_float(const Packed4bit& q) {
  if (!q.nested) return q.absmax;
  const auto& s = *q.nested;
  if (s.qabsmax.is_cuda()) return device::dequantize_nested_absmax(s);
  // code * absmax2 (one float32 multiply), then + offset: bitsandbytes' two separate steps.
  auto absmax = dequantize_blockwise_8bit(s.qabsmax, s.absmax2, s.code, s.blocksize);
  return absmax.add_(s.offset);
}

namespace {

void check_out_dtype(at::ScalarType t) {
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
              "dequantize_4bit: output dtype ",
              t,
              " is not supported; accepted: float32, bfloat16, float16");
}

void dequantize_4bit_impl(const Packed4bit& q, at::Tensor& out, bool allow_simd) {
  q.validate();
  check_out_dtype(out.scalar_type());
  TORCH_CHECK(out.numel() == q.numel() && out.is_contiguous() && out.device() == q.packed.device(),
              "dequantize_4bit_into: out must be a contiguous tensor of ",
              q.numel(),
              " elements on ",
              q.packed.device(),
              ", got ",
              out.sizes(),
              " on ",
              out.device());
  const at::Tensor absmax = absmax_float(q).contiguous();
  if (q.packed.is_cuda()) {
    device::dequantize_4bit(q.packed, absmax, q.quant_type, q.blocksize, out);
    return;
  }
  dispatch_float(out.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    dequantize_4bit_cpu<T>(q.packed.const_data_ptr<uint8_t>(),
                           absmax.const_data_ptr<float>(),
                           q.numel(),
                           q.blocksize,
                           q.quant_type,
                           out.data_ptr<T>(),
                           allow_simd);
  });
}

}  // namespace

at::Tensor dequantize_4bit(const Packed4bit& q, std::optional<at::ScalarType> dtype) {
  check_out_dtype(dtype.value_or(q.dtype));
  at::Tensor out = at::empty(q.shape, q.packed.options().dtype(dtype.value_or(q.dtype)));
  dequantize_4bit_impl(q, out, /*allow_simd=*/true);
  return out;
}

void dequantize_4bit_into(const Packed4bit& q, at::Tensor& out) {
  dequantize_4bit_impl(q, out, /*allow_simd=*/true);
}

at::Tensor dequantize_4bit_scalar(const Packed4bit& q, at::ScalarType dtype) {
  TORCH_CHECK(q.packed.device().is_cpu(),
              "dequantize_4bit_scalar is the CPU reference loop; got a tensor on ",
              q.packed.device());
  check_out_dtype(dtype);
  at::Tensor out = at::empty(q.shape, q.packed.options().dtype(dtype));
  dequantize_4bit_impl(q, out, /*allow_simd=*/false);
  return out;
}

}  // namespace qtrain::ops
