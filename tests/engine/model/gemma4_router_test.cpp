// Gemma 4's router against transformers' Gemma4TextRouter on random inputs and weights
// (scripts/reference/gemma4_reference.py): probabilities, top-k weights and experts, and the
// gradients into x, proj, scale and per_expert_scale; and the routing in bfloat16.
#include "engine/model/gemma4_router.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max()).item<double>();
}

Gemma4Router router_from(const io::SafetensorsFile& ref, at::ScalarType dtype, bool trainable) {
  Gemma4Router r;
  r.proj = ref.tensor("proj").to(dtype).requires_grad_(trainable);
  r.scale = ref.tensor("scale").to(dtype).requires_grad_(trainable);
  r.per_expert_scale = ref.tensor("per_expert_scale").to(dtype).requires_grad_(trainable);
  r.top_k = ref.tensor("top_k").item<int64_t>();
  r.eps = ref.tensor("eps").item<double>();
  return r;
}

// float32 on both sides, the same ops in the same order: rounding only (1e-6 relative); the
// gradients pass softmax, top-k and the renormalisation (1e-5 of the largest).
TEST(Gemma4Router, MatchesTransformersWithGradients) {
  const auto ref = io::SafetensorsFile::open(test::model_fixture("gemma4_router") / "reference.safetensors");
  const auto r = router_from(ref, at::kFloat, true);
  const auto x = ref.tensor("x").requires_grad_(true);
  const auto routing = gemma4_route(r, x);
  EXPECT_TRUE(at::equal(routing.experts, ref.tensor("fp32.experts")));
  EXPECT_EQ(routing.weights.scalar_type(), at::kFloat);
  EXPECT_LT(max_rel(routing.logits, ref.tensor("fp32.probs")), 1e-6);
  EXPECT_LT(max_rel(routing.weights, ref.tensor("fp32.weights")), 1e-6);
  ((routing.weights * ref.tensor("g")).sum() + (routing.logits * ref.tensor("g2")).sum()).backward();
  EXPECT_LT(max_rel(x.grad(), ref.tensor("grad.x")), 1e-5);
  EXPECT_LT(max_rel(r.proj.grad(), ref.tensor("grad.proj")), 1e-5);
  EXPECT_LT(max_rel(r.scale.grad(), ref.tensor("grad.scale")), 1e-5);
  EXPECT_LT(max_rel(r.per_expert_scale.grad(), ref.tensor("grad.per_expert_scale")), 1e-5);
}

// bfloat16: the same bf16 norm, scale and matmul, then float32 softmax: the same experts, and
// weights equal up to float32 rounding.
TEST(Gemma4Router, RoutesAsTransformersInBfloat16) {
  const auto ref = io::SafetensorsFile::open(test::model_fixture("gemma4_router") / "reference.safetensors");
  const auto routing = gemma4_route(router_from(ref, at::kBFloat16, false), ref.tensor("x").to(at::kBFloat16));
  EXPECT_TRUE(at::equal(routing.experts, ref.tensor("bf16.experts")));
  EXPECT_EQ(routing.weights.scalar_type(), at::kFloat);
  EXPECT_LT(max_rel(routing.weights, ref.tensor("bf16.weights")), 1e-6);
  EXPECT_LT(max_rel(routing.logits, ref.tensor("bf16.probs")), 1e-6);
}

TEST(Gemma4Router, RejectsATopKAboveTheExpertCount) {
  Gemma4Router r{at::zeros({4, 8}), at::ones({8}), at::ones({4}), 5};
  EXPECT_THROW(gemma4_route(r, at::zeros({2, 8})), c10::Error);
}

}  // namespace
}  // namespace qtrain::engine::model
