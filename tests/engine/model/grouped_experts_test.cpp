// The grouped expert kernel (Note [Grouped expert GEMM]) against the per-expert one on the same
// experts, routing and LoRA: outputs and every gradient (x, routing weights, both LoRA tensors of
// both projections) for float32, bfloat16, NF4 and INT8 experts, with an expert no token chose; the
// chunking of the workspace; autograd's in-place check on the experts' stored tensors; and the
// refusal of what cannot be grouped. On the CPU at::_grouped_mm loops over the groups, so this
// checks qtrain's side (grouping, offsets, the LoRA layout, the backward node), not CUTLASS.
// INT8 experts with the default int8_compute (dequantize) are grouped too.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "engine/model/grouped_expert_linear.h"
#include "engine/model/moe_experts.h"
#include "tests/random_experts.h"

namespace qtrain::engine::model {
namespace {

const test::ExpertShape kShape;
constexpr int64_t kExperts = 6, kHidden = 64, kInter = 32, kUnused = 3;

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max().clamp_min(1e-30))
      .item<double>();
}

MoeExperts make_experts(const QuantSpec& quant, at::ScalarType dtype) {
  return test::random_experts(kShape, quant, dtype);
}

struct Variant {
  QuantSpec::Kind kind;
  at::ScalarType dtype;
  double tolerance;
  const char* name;
};

class GroupedExperts : public testing::TestWithParam<Variant> {};

// On the CPU a grouped product is a loop of the same matrix products over the groups, so the
// outputs and the input gradients agree to float32 summation order (1.7e-7 measured; bfloat16:
// equal), and the LoRA gradients, which gather each expert's rows in a different order, to
// 3.5e-7 (all six variants). 1e-6 leaves room for another CPU's vector width.
TEST_P(GroupedExperts, MatchThePerExpertKernelInOutputsAndEveryGradient) {
  const auto v = GetParam();
  QuantSpec quant;
  quant.kind = v.kind;
  quant.double_quant = v.kind == QuantSpec::Kind::nf4;
  auto ex = make_experts(quant, v.dtype);
  ASSERT_TRUE(ex.groupable(v.dtype));
  const auto per_expert = test::run_experts(ex, ExpertKernel::per_expert, kShape, v.dtype);
  const auto grouped = test::run_experts(ex, ExpertKernel::grouped, kShape, v.dtype);
  EXPECT_LT(max_rel(grouped.y, per_expert.y), v.tolerance);
  EXPECT_LT(max_rel(grouped.x, per_expert.x), v.tolerance);
  EXPECT_LT(max_rel(grouped.weights, per_expert.weights), v.tolerance);
  const char* names[] = {"gate_up lora_A", "gate_up lora_B", "down lora_A", "down lora_B"};
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(grouped.lora[i].defined()) << names[i];
    EXPECT_LT(max_rel(grouped.lora[i], per_expert.lora[i]), v.tolerance) << names[i];
  }
  // The expert no token chose gets exactly zero LoRA gradient (its A rows, its B columns).
  EXPECT_EQ(grouped.lora[0].view({kExperts, 8, kHidden})[kUnused].abs().max().item<double>(), 0.0);
  EXPECT_EQ(grouped.lora[1].view({2 * kInter, 8, kExperts}).select(2, kUnused).abs().max().item<double>(), 0.0);
  // And the LoRA is not a no-op: without it the outputs differ.
  auto bare = make_experts(quant, v.dtype);
  bare.gate_up_lora.reset();
  bare.down_lora.reset();
  bare.kernel = ExpertKernel::grouped;
  at::manual_seed(3);
  const auto x = at::randn({kShape.tokens, kHidden}).to(v.dtype);
  EXPECT_GT(max_rel(bare.forward(x, test::random_routing(kShape, v.dtype), false), grouped.y), 10 * v.tolerance);
}

INSTANTIATE_TEST_SUITE_P(Bases,
                         GroupedExperts,
                         testing::Values(Variant{QuantSpec::Kind::none, at::kFloat, 1e-6, "fp32"},
                                         Variant{QuantSpec::Kind::none, at::kBFloat16, 1e-6, "bf16"},
                                         Variant{QuantSpec::Kind::nf4, at::kFloat, 1e-6, "nf4"},
                                         Variant{QuantSpec::Kind::nf4, at::kBFloat16, 1e-6, "nf4_bf16"},
                                         Variant{QuantSpec::Kind::int8, at::kFloat, 1e-6, "int8"},
                                         Variant{QuantSpec::Kind::int8, at::kBFloat16, 1e-6, "int8_bf16"}),
                         [](const auto& info) { return std::string(info.param.name); });

// A workspace of two experts' weights: three chunks for five experts give the same products and
// gradient as one chunk, bit for bit (each block's product is the same either way).
TEST(GroupedExpertLinear, ChunksOfTheWorkspaceChangeNoBit) {
  QuantSpec nf4;
  nf4.kind = QuantSpec::Kind::nf4;
  const auto ex = make_experts(nf4, at::kFloat);
  std::vector<const LinearLayer*> layers;
  for (int64_t e = 0; e < 5; ++e) layers.push_back(&ex.gate_up[e]);
  const std::vector<int64_t> counts = {3, 1, 7, 2, 5};
  at::manual_seed(5);
  const auto rows = at::randn({18, kHidden});
  const auto g = at::randn({18, 2 * kInter});
  std::vector<at::Tensor> ys, grads;
  for (int64_t workspace : {int64_t{2} * 2 * kInter * kHidden * 4, kGroupedExpertWorkspaceBytes}) {
    const auto x = rows.clone().requires_grad_();
    const auto y = grouped_expert_linear(x, counts, layers, workspace);
    y.backward(g);
    ys.push_back(y.detach());
    grads.push_back(x.grad());
  }
  EXPECT_TRUE(at::equal(ys[0], ys[1]));
  EXPECT_TRUE(at::equal(grads[0], grads[1]));
  // Block by block, the product is each expert's own.
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const auto block = rows.narrow(0, row, counts[e]);
    EXPECT_LT(max_rel(ys[0].narrow(0, row, counts[e]), at::linear(block, layers[e]->dense_weight(at::kFloat))), 1e-6);
    row += counts[e];
  }
}

// A stored weight tensor written in place between forward and backward (a reused streaming
// buffer) stops backward with autograd's error instead of giving gradients of other weights.
TEST(GroupedExpertLinear, AStoredWeightOverwrittenBeforeBackwardIsAnError) {
  QuantSpec nf4;
  nf4.kind = QuantSpec::Kind::nf4;
  const auto ex = make_experts(nf4, at::kFloat);
  const auto x = at::randn({4, kHidden}).requires_grad_();
  const auto y = grouped_expert_linear(x, {1, 3}, {&ex.gate_up[0], &ex.gate_up[1]});
  std::get<ops::Packed4bit>(ex.gate_up[1].weight).packed.add_(0);
  try {
    y.sum().backward();
    FAIL() << "backward ran on an overwritten weight";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos) << e.what();
  }
}

// INT8 experts computed with LLM.int8's int8 product (int8_compute: llm_int8) keep it: the
// automatic choice stays per expert, and asking for the grouped kernel names the experts and why.
// (With the default int8_compute, dequantize, they are grouped: the Bases rows above.)
TEST(GroupedExperts, LlmInt8ExpertsAreNotGrouped) {
  QuantSpec int8;
  int8.kind = QuantSpec::Kind::int8;
  int8.int8_compute = ops::Int8Compute::llm_int8;
  auto ex = make_experts(int8, at::kFloat);
  EXPECT_FALSE(ex.groupable(at::kFloat));
  EXPECT_FALSE(ex.uses_grouped_kernel(at::Device(at::kCUDA, 0), at::kFloat));
  ex.kernel = ExpertKernel::grouped;
  try {
    ex.uses_grouped_kernel(at::kCPU, at::kFloat);
    FAIL() << "LLM.int8 experts were grouped";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.experts: the grouped expert kernel needs experts without "
                                         "LLM.int8 products (int8_compute: llm_int8)"),
              std::string::npos)
        << e.what();
  }
}

// The automatic choice: grouped on CUDA, per expert on the CPU, and per expert for a LoRA rank
// whose float32 rows are not 16-byte aligned.
TEST(GroupedExperts, AutomaticGroupsOnCudaOnly) {
  QuantSpec nf4;
  nf4.kind = QuantSpec::Kind::nf4;
  auto ex = make_experts(nf4, at::kBFloat16);
  EXPECT_TRUE(ex.uses_grouped_kernel(at::Device(at::kCUDA, 0), at::kBFloat16));
  EXPECT_FALSE(ex.uses_grouped_kernel(at::kCPU, at::kBFloat16));
  lora::LoraConfig lc;
  lc.r = 2;
  lc.target_parameters = {"mlp.experts.down_proj"};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  ex.down_lora = lora::expert_lora_init(kExperts, kInter, kHidden, lc, gen);
  EXPECT_FALSE(ex.uses_grouped_kernel(at::Device(at::kCUDA, 0), at::kBFloat16));
}

}  // namespace
}  // namespace qtrain::engine::model
