// The oracle itself. Every parity test compares qtrain with bitsandbytes as
// scripts/reference/bnb_oracle.py makes it compute: the same answers on every x86 CPU, where
// bitsandbytes' own native CPU dequantize is wrong on rows that are not whole blocks and its
// AVX512-BF16 eval path repacks the weight (see the Note in that script). These tests pin what
// the oracle computes on this CPU to a direct computation from the codebook and the block absmax,
// written with plain at:: indexing, independent of qtrain's kernels and of bitsandbytes.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/reference.h"

namespace qtrain::test {
namespace {

const ScriptTensors& oracle() {
  static const ScriptTensors r = run_reference_script("bnb_oracle.py", "check");
  return r;
}

const at::Tensor& tensor(const std::string& name) {
  const auto it = oracle().tensors.find(name);
  TORCH_CHECK(it != oracle().tensors.end(), "bnb_oracle.py check wrote no tensor '", name, "'");
  return it->second;
}

// The prefixes of the 4-bit cases ("nf4_0.", "nf4_0n." with double quantization, "fp4_2.", ...):
// six shapes, each with and without double quantization.
constexpr size_t kCases = 12;
std::set<std::string> kbit_cases() {
  std::set<std::string> out;
  for (const auto& [name, t] : oracle().tensors) {
    if (name.starts_with("nf4_") || name.starts_with("fp4_")) out.insert(name.substr(0, name.find('.') + 1));
  }
  return out;
}

at::Tensor block_index(int64_t n, int64_t blocksize) {
  return at::arange(n, at::kLong).div(blocksize, "floor");
}

// Per-block absmax in float32: stored as is, or (double quantization) the 8-bit code of each
// block's absmax looked up in the nested codebook, times the absmax of its group of 256, plus
// the offset.
at::Tensor block_absmax(const std::string& p) {
  if (oracle().tensors.count(p + "absmax") != 0) return tensor(p + "absmax");
  const auto codes = tensor(p + "qabsmax").to(at::kLong);
  return tensor(p + "nested_quant_map").index_select(0, codes) *
             tensor(p + "absmax2").index_select(0, block_index(codes.numel(), 256)) +
         tensor(p + "offset");
}

// value[i] = table[code of element i] * absmax[i / blocksize], in float32, rounded once to
// `dtype`. Two codes a byte, the even element in the high nibble (bitsandbytes' order); an odd
// element count leaves one padding nibble at the end. The table is the stored quant map, except
// that FP4 code 8 (sign bit, zero magnitude) decodes to -0.0 as in bitsandbytes' kernels.
at::Tensor direct_dequantize(const std::string& p, at::IntArrayRef shape, at::ScalarType dtype) {
  const int64_t n = c10::multiply_integers(shape);
  const auto bytes = tensor(p + "packed").reshape({-1}).to(at::kLong);
  const auto codes = at::stack({bytes.bitwise_right_shift(4), bytes.bitwise_and(15)}, 1).reshape({-1}).narrow(0, 0, n);
  auto table = tensor(p + "quant_map").clone();
  if (p.starts_with("fp4_")) table[8] = -0.0f;
  const auto values = table.index_select(0, codes);
  const auto scale = block_absmax(p).index_select(0, block_index(n, tensor(p + "blocksize").item<int64_t>()));
  return (values * scale).to(dtype).reshape(shape);
}

void require_oracle() {
  ASSERT_TRUE(oracle().error.empty()) << oracle().error;
}

TEST(BnbOracle, DequantizeIsCodebookTimesAbsmaxOnAwkwardShapes) {
  if (oracle().skipped) GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
  require_oracle();
  const auto cases = kbit_cases();
  ASSERT_EQ(cases.size(), kCases);
  for (const auto& p : cases) {
    const auto& dq = tensor(p + "dq");
    const auto expected = direct_dequantize(p, dq.sizes(), dq.scalar_type());
    EXPECT_TRUE(bitwise_equal(dq, expected))
        << p << " " << dq.sizes() << " blocksize " << tensor(p + "blocksize").item<int64_t>() << ": "
        << count_bitwise_diff(dq, expected) << " of " << dq.numel() << " values differ, max |diff| "
        << (dq.to(at::kFloat) - expected.to(at::kFloat)).abs().max().item<float>();
  }
}

TEST(BnbOracle, Linear4bitEvalForwardIsADenseMatmulOfThatWeight) {
  if (oracle().skipped) GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
  require_oracle();
  const auto cases = kbit_cases();
  ASSERT_EQ(cases.size(), kCases);
  for (const auto& p : cases) {
    const auto& y = tensor(p + "linear");
    // The eval forward dequantizes to the input's dtype (float32) straight from the float32
    // product, whatever dtype the weight was quantized from.
    const auto w = direct_dequantize(p, {y.size(1), tensor(p + "x").size(1)}, at::kFloat);
    const auto expected = at::linear(tensor(p + "x"), w);
    // Same float32 matmul on the same library; only the blocking of the sum may differ with the
    // thread count, a few ulps of the outputs' scale. The AVX512-BF16 repack this guards against
    // computes in bf16 and is off by ~1e-2 relative.
    const double scale = expected.abs().max().item<double>();
    EXPECT_TRUE(at::allclose(y, expected, /*rtol=*/0, /*atol=*/1e-5 * scale))
        << p << ": max |diff| " << (y - expected).abs().max().item<double>() << " at output scale " << scale;
  }
}

TEST(BnbOracle, Int8MatmulIsTheExactIntegerProduct) {
  if (oracle().skipped) GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
  require_oracle();
  const auto exact = at::matmul(tensor("int8.a").to(at::kLong), tensor("int8.b").to(at::kLong).t()).to(at::kInt);
  EXPECT_TRUE(bitwise_equal(tensor("int8.product"), exact))
      << count_bitwise_diff(tensor("int8.product"), exact) << " of " << exact.numel() << " products differ";
  // The case includes an odd product past 2^24, which bitsandbytes' float32 fallback (CPUs
  // without AVX-512) cannot represent: the oracle must not depend on which path this CPU takes.
  const int64_t corner = exact[0][0].item<int64_t>();
  EXPECT_GT(corner, int64_t{1} << 24);
  EXPECT_EQ(corner % 2, 1);
}

}  // namespace
}  // namespace qtrain::test
