// Quantized linear layers: forward and input gradients against bitsandbytes' training matmuls
// (MatMul4Bit, MatMul8bitFp, MatMul8bitLt on the CPU) and against a dense float reference; the
// autograd node holds only the packed weight; overwriting it before backward is an error.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "ops/linear_4bit.h"
#include "ops/linear_int8.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::ops {
namespace {

using test::expect_error;

const engine::io::SafetensorsFile& ref() {
  return test::bnb_reference();
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max()).item<double>();
}

// Tolerances: in float32 both sides dequantize the same bytes to the same float32 weight and run
// the same matmul, so only BLAS summation order differs (~1e-6 relative). In bfloat16 the outputs
// are rounded to 8 bits of mantissa (2^-8 = 0.4% relative per element, and summation order moves
// a few of them by one ulp).
double tolerance(at::ScalarType t) {
  return t == at::kFloat ? 1e-5 : 1e-2;
}

std::optional<at::Tensor> reference_bias(const nlohmann::json& c) {
  if (!c.at("bias").get<bool>()) return std::nullopt;
  return ref().tensor(c.at("prefix").get<std::string>() + "bias");
}

TEST(Linear4bit, ForwardAndInputGradMatchBitsandbytesMatMul4Bit) {
  for (const auto& c : test::reference_cases("linear")) {
    const auto p = c.at("prefix").get<std::string>();
    const auto x0 = ref().tensor(p + "x");
    const auto dt = x0.scalar_type();
    for (auto type : {QuantType::nf4, QuantType::fp4}) {
      const auto name = p + std::string(quant_type_name(type));
      const auto w = quantize_4bit(ref().tensor(p + "w").to(dt), type, 64, true);
      auto x = x0.clone().requires_grad_(true);
      auto y = linear_4bit(x, w, reference_bias(c));
      y.backward(ref().tensor(p + "gy"));
      EXPECT_LT(max_rel_diff(y.detach(), ref().tensor(name + ".y")), tolerance(dt)) << c.dump();
      EXPECT_LT(max_rel_diff(x.grad(), ref().tensor(name + ".gx")), tolerance(dt)) << c.dump();
    }
  }
}

TEST(LinearInt8, ForwardAndInputGradMatchBitsandbytesMatMul8bitFp) {
  for (const auto& c : test::reference_cases("linear")) {
    const auto p = c.at("prefix").get<std::string>();
    const auto w = Int8Weight::from_quantized(ref().tensor(p + "cb"), ref().tensor(p + "scb"), p + "cb");
    auto x = ref().tensor(p + "x").clone().requires_grad_(true);
    auto y = linear_int8(x, w, reference_bias(c), Int8Compute::dequantize);
    y.backward(ref().tensor(p + "gy"));
    EXPECT_LT(max_rel_diff(y.detach(), ref().tensor(p + "int8fp.y")), tolerance(x.scalar_type())) << c.dump();
    EXPECT_LT(max_rel_diff(x.grad(), ref().tensor(p + "int8fp.gx")), tolerance(x.scalar_type())) << c.dump();
  }
}

TEST(LinearInt8, Llmint8ModeMatchesBitsandbytesMatMul8bitLt) {
  for (const auto& c : test::reference_cases("linear")) {
    const auto p = c.at("prefix").get<std::string>();
    const auto w = Int8Weight::from_quantized(ref().tensor(p + "cb"), ref().tensor(p + "scb"), p + "cb");
    auto x = ref().tensor(p + "x").clone();
    x.select(1, 3).mul_(40);  // the reference's outlier column
    x.requires_grad_(true);
    auto y = linear_int8(x, w, reference_bias(c), Int8Compute::llm_int8, 6.0);
    y.backward(ref().tensor(p + "gy"));
    // Same int8 codes on both sides; bitsandbytes' default backend rescales with 6.200124e-05, a
    // typo of 1/127^2 = 6.2000124e-05 (1.8e-5 relative), and rounds through float16 on the way.
    // The int8 product is exact on every CPU (K <= 256 here, and the oracle computes it exactly:
    // see Note [bitsandbytes' CPU defects] in scripts/reference/bnb_oracle.py), so these bounds
    // hold with or without AVX-512.
    EXPECT_LT(max_rel_diff(y.detach(), ref().tensor(p + "int8lt.y")), x.scalar_type() == at::kFloat ? 1e-3 : 1e-2)
        << c.dump();
    EXPECT_LT(max_rel_diff(x.grad(), ref().tensor(p + "int8lt.gx")), tolerance(x.scalar_type())) << c.dump();
  }
}

TEST(Linear4bit, EqualsDenseReferenceAndPassesGradientCheck) {
  at::manual_seed(1);
  const auto w = quantize_4bit(at::randn({24, 40}), QuantType::fp4, 32);
  const auto w_dense = dequantize_4bit(w, at::kFloat);
  const auto bias = at::randn({24}).requires_grad_(true);
  auto x = at::randn({2, 3, 40}).requires_grad_(true);
  auto y = linear_4bit(x, w, bias);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto bias_ref = bias.detach().clone().requires_grad_(true);
  auto y_ref = at::linear(x_ref, w_dense, bias_ref);
  EXPECT_TRUE(at::allclose(y, y_ref, 1e-6, 1e-6));
  const auto g = at::randn_like(y);
  y.backward(g);
  y_ref.backward(g);
  EXPECT_TRUE(at::allclose(x.grad(), x_ref.grad(), 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(bias.grad(), bias_ref.grad(), 1e-6, 1e-6));
  // Central differences: the op is linear in x, so they are exact up to float32 rounding.
  const double eps = 1e-2;
  auto xd = x.detach().clone();
  for (int64_t i : {0, 17, 59, 119}) {
    auto flat = xd.view({-1});
    const float orig = flat[i].item<float>();
    flat[i] = orig + eps;
    const double up = (linear_4bit(xd, w, bias.detach()) * g).sum().item<double>();
    flat[i] = orig - eps;
    const double down = (linear_4bit(xd, w, bias.detach()) * g).sum().item<double>();
    flat[i] = orig;
    EXPECT_NEAR((up - down) / (2 * eps), x.grad().view({-1})[i].item<double>(), 2e-3) << "element " << i;
  }
}

TEST(LinearInt8, EqualsDenseReference) {
  at::manual_seed(2);
  const auto w = Int8Weight::from_float(at::randn({24, 40}));
  auto x = at::randn({5, 40}).requires_grad_(true);
  auto y = linear_int8(x, w);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto y_ref = at::linear(x_ref, w.dequantize(at::kFloat));
  EXPECT_TRUE(at::allclose(y, y_ref, 1e-6, 1e-6));
  y.sum().backward();
  y_ref.sum().backward();
  EXPECT_TRUE(at::allclose(x.grad(), x_ref.grad(), 1e-6, 1e-6));
}

template <typename Fn>
int64_t saved_bytes(const at::Tensor& y) {
  auto* node = dynamic_cast<torch::autograd::CppNode<Fn>*>(y.grad_fn().get());
  EXPECT_NE(node, nullptr) << "grad_fn is " << (y.grad_fn() ? y.grad_fn()->name() : "none");
  if (node == nullptr) return -1;
  int64_t bytes = 0;
  for (const auto& t : node->ctx_.get_saved_variables()) bytes += t.defined() ? t.nbytes() : 0;
  for (const auto& [key, value] : node->ctx_.saved_data) EXPECT_FALSE(value.isTensor()) << key;
  return bytes;
}

TEST(Linear4bit, AutogradNodeHoldsOnlyThePackedWeight) {
  // 4096 x 1024 bf16 would be 8 MiB dequantized; the node must hold ~2 MiB of codes + absmax.
  const auto w = quantize_4bit(at::randn({1024, 4096}).to(at::kBFloat16), QuantType::nf4, 64, true);
  auto x = at::randn({4, 4096}).to(at::kBFloat16).requires_grad_(true);
  const auto y = linear_4bit(x, w);
  const int64_t bytes = saved_bytes<Linear4bitFunction>(y);
  EXPECT_EQ(bytes, w.nbytes());
  EXPECT_LT(bytes, 1024 * 4096 * 2 / 3);
}

TEST(LinearInt8, AutogradNodeHoldsOnlyCbAndScb) {
  const auto w = Int8Weight::from_float(at::randn({512, 1024}));
  auto x = at::randn({4, 1024}).requires_grad_(true);
  const auto y = linear_int8(x, w);
  EXPECT_EQ(saved_bytes<LinearInt8Function>(y), w.nbytes());
}

TEST(Linear4bit, OverwritingThePackedWeightBeforeBackwardIsAnError) {
  // A streaming buffer reused before backward ran (bitsandbytes issue #2034) must fail loudly.
  const auto w = quantize_4bit(at::randn({16, 64}), QuantType::nf4, 64);
  auto x = at::randn({3, 64}).requires_grad_(true);
  auto y = linear_4bit(x, w);
  w.packed.fill_(0x12);
  expect_error([&] { y.sum().backward(); }, "modified by an inplace operation");
}

TEST(LinearInt8, ForwardAndBackwardNeverWriteCbOrScb) {
  const auto w = Int8Weight::from_float(at::randn({16, 64}));
  const auto cb = w.cb().clone();
  const auto scb = w.scb().clone();
  auto x = at::randn({3, 64}).requires_grad_(true);
  // Twice forward (as a recompute does), then backward through both.
  auto y = linear_int8(x, w, std::nullopt, Int8Compute::llm_int8) + linear_int8(x, w);
  y.sum().backward();
  EXPECT_TRUE(test::bitwise_equal(cb, w.cb()));
  EXPECT_TRUE(test::bitwise_equal(scb, w.scb()));
  EXPECT_EQ(w.cb()._version(), 0u);
  EXPECT_EQ(w.scb()._version(), 0u);
}

TEST(Linear, BadInputIsRejected) {
  const auto w = quantize_4bit(at::randn({16, 64}), QuantType::nf4, 64);
  expect_error(
      [&] {
        linear_4bit(at::randn({3, 32}), w);
      },
      "linear_4bit: x has 32 input features but the weight [16, 64] expects 64");
  expect_error([&] { linear_4bit(at::randn({3, 64}), w, at::randn({15})); }, "bias must be [16], got [15]");
  expect_error([&] { linear_4bit(at::randn({3, 64}).to(at::kDouble), w); }, "x has dtype Double");
  const auto q1 = quantize_4bit(at::randn({64}), QuantType::nf4, 64);
  expect_error([&] { linear_4bit(at::randn({3, 64}), q1); }, "weight must be 2-D [out, in], got shape [64]");
  const auto w8 = Int8Weight::from_float(at::randn({16, 64}));
  expect_error([&] { linear_int8(at::randn({3, 63}), w8); }, "linear_int8: x has 63 input features");
}

}  // namespace
}  // namespace qtrain::ops
