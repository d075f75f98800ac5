// LLM.int8() quantization: parity with bitsandbytes' int8_vectorwise_quant / dequant, the
// Int8Weight invariants (built once, SCB never guessed), and the int8 matmul.
#include "ops/quant/int8.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::ops {
namespace {

using test::expect_error;

const engine::io::SafetensorsFile& ref() {
  return test::bnb_reference();
}

TEST(Int8, VectorwiseQuantIsIdenticalToBitsandbytes) {
  const auto cases = test::reference_cases("int8_quant");
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& c : cases) {
    const auto p = c.at("prefix").get<std::string>();
    const double threshold = c.at("threshold").get<double>();
    const auto r = int8_vectorwise_quant(ref().tensor(p + "a"), threshold);
    EXPECT_TRUE(test::bitwise_equal(r.q, ref().tensor(p + "q")))
        << c.dump() << ": " << test::count_bitwise_diff(r.q, ref().tensor(p + "q")) << " codes differ";
    EXPECT_TRUE(test::bitwise_equal(r.row_absmax, ref().tensor(p + "stats"))) << c.dump();
    if (threshold > 0) {
      ASSERT_TRUE(r.outlier_cols.defined());
      EXPECT_TRUE(at::equal(r.outlier_cols, ref().tensor(p + "outlier_cols"))) << c.dump();
    } else {
      EXPECT_FALSE(r.outlier_cols.defined());
    }
    EXPECT_TRUE(test::bitwise_equal(int8_vectorwise_dequant(ref().tensor(p + "q"), ref().tensor(p + "stats")),
                                    ref().tensor(p + "dq")))
        << c.dump();
  }
}

TEST(Int8, WeightFromFloatEqualsBitsandbytesInt8Params) {
  for (const auto& c : test::reference_cases("linear")) {
    const auto p = c.at("prefix").get<std::string>();
    const auto w = Int8Weight::from_float(ref().tensor(p + "w"));
    EXPECT_TRUE(test::bitwise_equal(w.cb(), ref().tensor(p + "cb"))) << c.dump();
    EXPECT_TRUE(test::bitwise_equal(w.scb(), ref().tensor(p + "scb"))) << c.dump();
  }
}

TEST(Int8, ScbIsTheRowAbsmaxAndCannotBeRecoveredFromCb) {
  const auto w = at::randn({16, 64});
  const auto q = Int8Weight::from_float(w);
  EXPECT_TRUE(at::equal(q.scb(), w.to(at::kHalf).abs().amax(1).to(at::kFloat)));
  // Every non-zero row reaches +-127, so amax(|CB|)/127 (the upstream "fallback") is 1 everywhere.
  EXPECT_TRUE(at::equal(q.cb().abs().amax(1).to(at::kInt), at::full({16}, 127, at::kInt)));
  expect_error([&] { Int8Weight::from_quantized(q.cb(), std::nullopt, "model.layers.0.mlp.down_proj.weight"); },
               "model.layers.0.mlp.down_proj.weight: int8 weight has no SCB (row absmax). SCB cannot be recovered");
  expect_error([&] { Int8Weight::from_quantized(q.cb(), at::Tensor(), "w"); }, "int8 weight has no SCB");
  expect_error([&] { Int8Weight::from_quantized(q.cb(), q.scb().narrow(0, 0, 3), "w"); },
               "w: SCB must be float32 [16], got Float [3]");
  expect_error([&] { Int8Weight::from_quantized(q.cb().to(at::kFloat), q.scb(), "w"); },
               "w: int8 weight (CB) must be int8 [out, in], got Float [16, 64]");
  const auto back = Int8Weight::from_quantized(q.cb(), q.scb(), "w");
  EXPECT_TRUE(at::equal(back.dequantize(at::kFloat), q.dequantize(at::kFloat)));
}

TEST(Int8, WeightDequantizeEqualsBitsandbytesFormulaInEveryDtype) {
  // bitsandbytes' MatMul8bitFp: CB.to(dtype) * (SCB * (1/127)); the vectorized loop must agree.
  const auto q = Int8Weight::from_float(at::randn({7, 77}) * 4);
  const auto scale = (q.scb() * (1.0f / 127.0f)).unsqueeze(1);
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    EXPECT_TRUE(test::bitwise_equal(q.dequantize(dt), (q.cb().to(at::kFloat) * scale).to(dt))) << dt;
  }
}

TEST(Int8, DequantizeErrorIsBoundedByHalfACode) {
  const auto w = at::randn({32, 128});
  const auto q = Int8Weight::from_float(w);
  const auto err = (q.dequantize(at::kFloat) - w).abs();
  const auto bound = q.scb().unsqueeze(1) / 127.0 * 0.5 + w.abs() * 1e-3;  // + fp16 rounding of w
  EXPECT_TRUE((err <= bound).all().item<bool>());
}

TEST(Int8, MixedMatmulMatchesAFloatReferenceAndUsesOutliers) {
  at::manual_seed(3);
  const auto w = at::randn({48, 96}) * 0.05;
  auto x = at::randn({10, 96});
  x.select(1, 7).mul_(30);  // an outlier column
  const auto q = Int8Weight::from_float(w);
  const auto y_ref = at::linear(x, q.dequantize(at::kFloat));
  const auto y = int8_mixed_matmul(x, q, std::nullopt, 6.0);
  // Only x's int8 rounding separates the two: at most half a code of each row's absmax.
  const double tol = (x.abs().amax() / 127.0 * 0.5 * w.abs().sum(1).max()).item<double>();
  EXPECT_LT((y - y_ref).abs().max().item<double>(), tol * 0.2);
  // Without the decomposition the outlier column dominates each row's scale and the error grows.
  const auto y_plain = int8_mixed_matmul(x, q, std::nullopt, 0.0);
  EXPECT_GT((y_plain - y_ref).abs().max().item<double>(), 2 * (y - y_ref).abs().max().item<double>());
}

TEST(Int8, BadInputIsRejected) {
  expect_error([] { int8_vectorwise_quant(at::empty({0, 4})); }, "is empty or undefined");
  expect_error([] { int8_vectorwise_quant(at::randn({4, 4}).t()); }, "is not contiguous");
  expect_error([] { int8_vectorwise_quant(at::randn({4, 4}).to(at::kDouble)); }, "has dtype Double");
  expect_error([] { int8_vectorwise_quant(at::randn({4, 4}), -1.0); }, "threshold must be finite and >= 0, got -1");
  expect_error([] { Int8Weight::from_float(at::randn({4})); }, "weight must be 2-D [out, in], got shape [4]");
}

}  // namespace
}  // namespace qtrain::ops
