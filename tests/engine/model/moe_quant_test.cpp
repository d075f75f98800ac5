// Per-expert quantization of MoE layers (Qwen3-MoE, Gemma 4): each expert's gate_up [2I, H] and down [H, I] quantized
// on its own, byte for byte what bitsandbytes makes of that slice alone (NF4 and FP4 with double
// quantization, INT8), the router never quantized; and the logits and loss of the NF4 model
// against transformers with the same dequantized expert weights. References:
// scripts/reference/moe_reference.py (transformers leaves 3-D experts unquantized, so the
// reference quantizes each slice with bitsandbytes itself).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/model/causal_lm.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/reference.h"

namespace qtrain::engine {
namespace {

using model::QuantSpec;

model::CausalLM load(const std::string& name, QuantSpec::Kind kind, bool quantize_experts) {
  model::LoadOptions o;
  o.quant.kind = kind;
  o.quant.double_quant = true;
  o.quantize_moe_experts = quantize_experts;
  return model::CausalLM::load(io::HfFolder::open(test::moe_fixture(name) / "base"), o);
}

class MoeQuant : public testing::TestWithParam<std::string> {};

TEST_P(MoeQuant, EachExpertSliceIsQuantizedAsBitsandbytesQuantizesItAlone) {
  const auto ref = io::SafetensorsFile::open(test::moe_fixture(GetParam()) / "reference.safetensors");
  for (const auto& [kind, fmt] : {std::pair{QuantSpec::Kind::nf4, "nf4"},
                                  std::pair{QuantSpec::Kind::fp4, "fp4"},
                                  std::pair{QuantSpec::Kind::int8, "int8"}}) {
    const auto lm = load(GetParam(), kind, true);
    int64_t compared = 0, expected = 0;
    for (const auto& layer : lm.layers()) {
      if (!layer.moe) continue;
      expected += 2 * layer.moe->experts.num_experts();
      const auto& router = layer.moe->gemma4_router ? layer.moe->gemma4_router->proj : layer.moe->router;
      EXPECT_EQ(router.scalar_type(), at::kFloat) << "the router is never quantized";
      for (int64_t e = 0; e < layer.moe->experts.num_experts(); ++e) {
        for (const auto& [part, linear] :
             {std::pair{"gate_up", &layer.moe->experts.gate_up[e]}, std::pair{"down", &layer.moe->experts.down[e]}}) {
          const auto p = "q." + std::to_string(layer.index) + "." + std::to_string(e) + "." + part + "." + fmt + ".";
          if (kind == QuantSpec::Kind::int8) {
            const auto& w = std::get<ops::Int8Weight>(linear->weight);
            EXPECT_TRUE(test::bitwise_equal(w.cb(), ref.tensor(p + "cb"))) << p;
            EXPECT_TRUE(test::bitwise_equal(w.scb(), ref.tensor(p + "scb"))) << p;
          } else {
            const auto& q = std::get<ops::Packed4bit>(linear->weight);
            ASSERT_TRUE(q.nested) << p;
            EXPECT_TRUE(test::bitwise_equal(q.packed, ref.tensor(p + "packed"))) << p;
            EXPECT_TRUE(test::bitwise_equal(q.nested->qabsmax, ref.tensor(p + "qabsmax"))) << p;
            EXPECT_TRUE(test::bitwise_equal(q.nested->absmax2, ref.tensor(p + "absmax2"))) << p;
            EXPECT_EQ(q.nested->offset, ref.tensor(p + "offset").item<float>()) << p;
          }
          ++compared;
        }
      }
    }
    // qwen3_moe: two sparse layers of 8 experts; gemma4_moe: five of 6.
    EXPECT_EQ(compared, GetParam() == "qwen3_moe" ? 2 * 8 * 2 : 5 * 6 * 2) << fmt;
    EXPECT_EQ(compared, expected) << fmt;
  }
}

TEST_P(MoeQuant, QuantizeMoeExpertsFalseKeepsExpertsInTheComputeDtype) {
  const auto lm = load(GetParam(), QuantSpec::Kind::nf4, false);
  for (const auto& layer : lm.layers()) {
    EXPECT_TRUE(std::holds_alternative<ops::Packed4bit>(layer.q.weight));
    if (!layer.moe) continue;
    for (const auto* l : layer.weight_linears()) {
      if (l->name.find(".experts.") == std::string::npos) continue;
      ASSERT_TRUE(std::holds_alternative<at::Tensor>(l->weight)) << l->name;
      EXPECT_EQ(std::get<at::Tensor>(l->weight).scalar_type(), at::kFloat);
    }
  }
}

// Same float32 ops on the same (dequantized) weights on both sides: the tolerances of the dense
// NF4 parity tests (model_parity_test.cpp). Gemma 4's reference keeps router.proj float, as
// qtrain does (transformers' load_in_4bit would quantize it).
TEST_P(MoeQuant, Nf4LogitsAndLossMatchTransformersWithTheSameExpertBytes) {
  const auto ref = io::SafetensorsFile::open(test::moe_fixture(GetParam()) / "reference.safetensors");
  auto lm = load(GetParam(), QuantSpec::Kind::nf4, true);
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  const auto logits = lm.logits(scheduler.eval_hidden(plan, ref.tensor("ids")));
  const auto expected = ref.tensor("nf4.logits");
  EXPECT_LT(((logits - expected).abs().max() / expected.abs().max()).item<double>(), 2e-5);
  const auto [sum, tokens] = scheduler.eval_loss(plan, ref.tensor("ids"), ref.tensor("labels"));
  EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor("nf4.loss").item<double>(), 2e-6);
}

// A Gemma 4 checkpoint that transformers' load_in_4bit saved holds router.proj in NF4 (it is an
// nn.Linear) and the 3-D experts in float: qtrain dequantizes the router (it never computes with
// a quantized one) and routes and computes as transformers does with it (the NF4 tolerances).
TEST(MoeQuantGemma4, ABitsandbytesCheckpointWithA4bitRouterLoadsToTransformersLogits) {
  const auto dir = test::moe_fixture("gemma4_moe");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  const auto folder = io::HfFolder::open(dir / "bnb4");
  ASSERT_TRUE(folder.contains("model.layers.0.router.proj.weight.quant_state.bitsandbytes__nf4"));
  auto lm = model::CausalLM::load(folder, {});
  for (const auto& layer : lm.layers()) {
    ASSERT_TRUE(layer.moe && layer.moe->gemma4_router);
    EXPECT_EQ(layer.moe->gemma4_router->proj.sizes(), at::IntArrayRef({6, 48}));
    EXPECT_EQ(layer.moe->gemma4_router->proj.scalar_type(), at::kFloat);
    EXPECT_TRUE(std::holds_alternative<ops::Packed4bit>(layer.q.weight));
  }
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  const auto logits = lm.logits(scheduler.eval_hidden(plan, ref.tensor("ids")));
  const auto expected = ref.tensor("bnb4.logits");
  EXPECT_LT(((logits - expected).abs().max() / expected.abs().max()).item<double>(), 2e-5);
  const auto [sum, tokens] = scheduler.eval_loss(plan, ref.tensor("ids"), ref.tensor("labels"));
  EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor("bnb4.loss").item<double>(), 2e-6);
}

INSTANTIATE_TEST_SUITE_P(Families,
                         MoeQuant,
                         testing::Values("qwen3_moe", "gemma4_moe"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace qtrain::engine
