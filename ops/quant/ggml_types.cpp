// See ggml_types.h and Note [ggml encodings] there.
#include "ops/quant/ggml_types.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace qtrain::ops {
namespace {

constexpr int64_t kQ8Block = 32;

at::Tensor bytes_of(const at::Tensor& t) {
  return t.contiguous().view(at::kByte).reshape({-1});
}

at::Tensor bf16(const at::Tensor& x) {
  const auto n = x.contiguous().view(at::kInt).to(at::kLong) & 0xffffffffLL;  // the bits, unsigned
  const auto nan = (n & 0x7fffffffLL) > 0x7f800000LL;
  const auto quiet = (n & 0xffff0000LL) | (64LL << 16);
  const auto m = at::where(nan, quiet, n);
  const auto rounded = at::bitwise_right_shift(m + (at::bitwise_right_shift(m, 16) & 1) + 0x7fffLL, 16);
  return bytes_of((rounded & 0xffffLL).to(at::kShort));
}

// numpy's np_roundf as gguf.quants writes it: floor(|v|) + floor(2 (|v| - floor(|v|))), signed;
// exact in float32 where v + 0.5 would round.
at::Tensor roundf(const at::Tensor& v) {
  const auto a = v.abs();
  const auto floored = a.floor();
  return v.sign() * (floored + (2 * (a - floored)).floor());
}

at::Tensor q8_0(const at::Tensor& x) {
  TORCH_CHECK(
      x.dim() >= 1 && x.size(-1) % kQ8Block == 0, "Q8_0 needs rows of a multiple of 32 values, got shape ", x.sizes());
  const auto blocks = x.contiguous().reshape({-1, kQ8Block});
  const auto d = blocks.abs().amax(1, /*keepdim=*/true) / 127;
  const auto id = at::where(d == 0, at::zeros_like(d), at::reciprocal(d));
  const auto q = roundf(blocks * id).to(at::kChar);
  const auto scale = d.to(at::kHalf).contiguous().view(at::kByte);  // [n, 2]
  return at::cat({scale, q.view(at::kByte)}, 1).reshape({-1});
}

}  // namespace

std::string ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return "F32";
    case GgmlType::f16:
      return "F16";
    case GgmlType::q8_0:
      return "Q8_0";
    case GgmlType::bf16:
      return "BF16";
  }
  return "?";
}

int64_t ggml_nbytes(GgmlType type, int64_t elements) {
  switch (type) {
    case GgmlType::f32:
      return 4 * elements;
    case GgmlType::f16:
    case GgmlType::bf16:
      return 2 * elements;
    case GgmlType::q8_0:
      return elements / kQ8Block * (2 + kQ8Block);
  }
  return 0;
}

at::Tensor ggml_encode(const at::Tensor& x, GgmlType type) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.device().is_cpu(), "ggml_encode: expected float32 on the CPU");
  switch (type) {
    case GgmlType::f32:
      return bytes_of(x);
    case GgmlType::f16:
      return bytes_of(x.to(at::kHalf));
    case GgmlType::bf16:
      return bf16(x);
    case GgmlType::q8_0:
      return q8_0(x);
  }
  TORCH_CHECK(false, "ggml_encode: unknown type");
}

}  // namespace qtrain::ops
