// The grouped expert kernel on a GPU (label gpu; skipped without one): in bfloat16 on CUDA,
// at::_grouped_mm is CUTLASS's grouped GEMM on Hopper and Blackwell (a loop elsewhere), so this
// checks what the CPU tests (grouped_experts_test.cpp) cannot: that the kernel accepts qtrain's
// workspace, offsets and LoRA layouts, and agrees with the per-expert kernel (cuBLAS) on the
// same device. The automatic choice on CUDA is the grouped kernel.
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include "engine/model/moe_experts.h"
#include "tests/random_experts.h"

namespace qtrain::engine::model {
namespace {

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max().clamp_min(1e-30))
      .item<double>();
}

// Shapes of a small real MoE (16 experts of width 256 over hidden 512, top-4, 256 tokens), every
// width a multiple of 16 bytes in bfloat16. Tolerance: both kernels accumulate in float32 and
// round each product to bfloat16 (2^-8 = 3.9e-3 relative), in different orders and tilings; the
// rounding compounds through two projections, the activation and the LoRA: 2e-2 of the largest
// value, on outputs and gradients alike.
TEST(GroupedExpertsCuda, TheGroupedKernelMatchesThePerExpertKernelInBfloat16) {
  if (!at::hasCUDA() || at::detail::getCUDAHooks().deviceCount() < 1) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  const test::ExpertShape shape{
      .experts = 16, .hidden = 512, .inter = 256, .tokens = 256, .top_k = 4, .unused = 5, .rank = 16};
  for (const auto kind : {QuantSpec::Kind::nf4, QuantSpec::Kind::none}) {
    SCOPED_TRACE(kind == QuantSpec::Kind::nf4 ? "nf4" : "bf16");
    QuantSpec quant;
    quant.kind = kind;
    quant.double_quant = kind == QuantSpec::Kind::nf4;
    auto ex = test::random_experts(shape, quant, at::kBFloat16, gpu);
    ASSERT_TRUE(ex.uses_grouped_kernel(gpu, at::kBFloat16));
    const auto per_expert = test::run_experts(ex, ExpertKernel::per_expert, shape, at::kBFloat16, gpu);
    const auto grouped = test::run_experts(ex, ExpertKernel::automatic, shape, at::kBFloat16, gpu);
    EXPECT_LT(max_rel(grouped.y, per_expert.y), 2e-2);
    EXPECT_LT(max_rel(grouped.x, per_expert.x), 2e-2);
    EXPECT_LT(max_rel(grouped.weights, per_expert.weights), 2e-2);
    for (size_t i = 0; i < grouped.lora.size(); ++i) {
      ASSERT_TRUE(grouped.lora[i].defined()) << "LoRA tensor " << i;
      EXPECT_LT(max_rel(grouped.lora[i], per_expert.lora[i]), 2e-2) << "LoRA tensor " << i;
    }
  }
}

}  // namespace
}  // namespace qtrain::engine::model
