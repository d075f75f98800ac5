// Parity with transformers (+ peft) on tiny Qwen3-MoE, Mixtral and Gemma 4 MoE models (float32,
// CPU): logits, loss and the experts each token is routed to; with PEFT adapters (attention only
// (Gemma 4: and its dense MLP), and that plus expert LoRA through target_parameters) also logits,
// loss and every LoRA gradient; and, for Qwen3-MoE and Mixtral, the load-balancing loss with its
// LoRA gradients.
// References: scripts/reference/moe_reference.py.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine {
namespace {

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  const auto x = a.to(at::kFloat), y = b.to(at::kFloat);
  return ((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item<double>();
}

// The router logits of every sparse layer for `ids`, running the layers in eval mode.
std::vector<at::Tensor> router_logits(const model::CausalLM& lm, const at::Tensor& ids) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> logits;
  auto inputs = lm.layer_inputs(ids.size(1));
  inputs.router_logits = &logits;
  auto h = lm.embed(ids);
  for (const auto& layer : lm.layers()) h = layer.forward(h, inputs, lm.config(), false);
  return logits;
}

// Tolerances, float32 throughout. Both sides run the same float32 ops on the same weights and
// differ by summation order in matmuls and attention (~1e-6 relative). Expert LoRA: PEFT merges
// delta W into each expert's weight, qtrain adds B_e (A_e x) unmerged, a reassociation at the
// same rounding level. Gradients pass backward through three to five layers, routing weights and
// softmax (Gemma 4: also its router's weightless norm and scales): 1e-4 of the largest gradient
// (the tolerance of the dense parity tests). None of this depends on the SIMD width: the routing
// is compared as expert ids, which the fixtures' decisive routers keep apart by far more than
// float32 rounding.
constexpr double kLogitsTol = 2e-5, kLossTol = 2e-6, kGradTol = 1e-4;

class MoeParity : public testing::TestWithParam<std::string> {};

TEST_P(MoeParity, LogitsLossAndExpertChoicesMatchTransformers) {
  const auto dir = test::moe_fixture(GetParam());
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), {});
  ASSERT_TRUE(lm.config().moe);
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  for (const std::string run : {"base", "short"}) {
    const auto ids = ref.tensor(run == "base" ? "ids" : "short_ids");
    EXPECT_LT(max_rel(lm.logits(scheduler.eval_hidden(plan, ids)), ref.tensor(run + ".logits")), kLogitsTol) << run;
    const auto logits = router_logits(lm, ids);
    const int64_t experts = lm.config().moe->num_experts;
    int64_t sparse = 0;
    for (const auto& layer : lm.layers()) {
      EXPECT_EQ(layer.moe.has_value(), lm.config().layer_is_sparse(layer.index));
      if (!layer.moe) continue;
      const auto expected = ref.tensor(run + ".topk." + std::to_string(layer.index));
      // Gemma 4 records probabilities, the others logits: softmax keeps the order of either.
      const auto chosen =
          std::get<1>(at::topk(at::softmax(logits.at(sparse++), -1, at::kFloat), lm.config().moe->top_k));
      EXPECT_TRUE(at::equal(chosen, expected)) << run << " layer " << layer.index;
      // The short sequence leaves experts untouched; the long one touches all (the fixture asserts it).
      const auto touched = at::bincount(chosen.reshape(-1), {}, experts).gt(0).sum().item<int64_t>();
      EXPECT_EQ(touched < experts, run == "short") << run << " layer " << layer.index;
    }
    EXPECT_EQ(sparse, static_cast<int64_t>(logits.size()));
  }
  const auto [sum, tokens] = scheduler.eval_loss(plan, ref.tensor("ids"), ref.tensor("labels"));
  EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor("base.loss").item<double>(), kLossTol);
}

// The base in bfloat16 on both sides (transformers: its eager expert loop, since its grouped_mm
// kernel refuses the fixtures' odd widths in bfloat16; qtrain: the per-expert kernel), against
// each other and against transformers in float32. Both round every product and norm to bfloat16
// in somewhat different orders, so the yardstick is bfloat16's own error, transformers' bf16
// logits against its fp32 ones (measured: 1.4e-2 of the largest logit on Qwen3-MoE, 1.6e-2 on
// Mixtral, 0.58 on the Gemma 4 fixture, whose random router scales and layer scalars amplify
// rounding). qtrain's bf16 logits must be within that of transformers' bf16 ones (measured: equal
// on Qwen3-MoE, 1.1e-2 on Mixtral, 0.43 on Gemma 4), and no further from fp32 than 1.25 times
// transformers' error (measured at most 1.12 times). Expert choices: a nearly tied router may
// pick another expert downstream (measured: 0 of 193, 145 and 433 (token, slot) choices on the
// Qwen3-MoE, fused Qwen3-MoE and Mixtral fixtures, 6 of 721 on Gemma 4); at least 98% agree. The
// loss within 2e-3 relative (measured up to 8e-4).
TEST_P(MoeParity, Bfloat16LogitsLossAndExpertChoicesMatchTransformers) {
  const auto dir = test::moe_fixture(GetParam());
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  model::LoadOptions options;
  options.dtype = at::kBFloat16;
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), options);
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  const auto ids = ref.tensor("ids");
  const auto logits = lm.logits(scheduler.eval_hidden(plan, ids));
  ASSERT_EQ(logits.scalar_type(), at::kBFloat16);
  const auto hf_bf16 = ref.tensor("bf16.logits"), hf_fp32 = ref.tensor("base.logits");
  const double bf16_error = max_rel(hf_bf16, hf_fp32);
  ASSERT_GT(bf16_error, 0.0);
  EXPECT_LE(max_rel(logits, hf_bf16), bf16_error);
  EXPECT_LE(max_rel(logits, hf_fp32), 1.25 * bf16_error);
  const auto [sum, tokens] = scheduler.eval_loss(plan, ids, ref.tensor("labels"));
  const double loss = (sum / tokens).item<double>(), expected = ref.tensor("bf16.loss").item<double>();
  EXPECT_NEAR(loss, expected, 2e-3 * expected);
  const auto routers = router_logits(lm, ids);
  int64_t sparse = 0, same = 0, total = 0;
  for (const auto& layer : lm.layers()) {
    if (!layer.moe) continue;
    const auto chosen =
        std::get<1>(at::topk(at::softmax(routers.at(sparse++), -1, at::kFloat), lm.config().moe->top_k));
    // As sets per token: topk's order among near-equal weights may differ.
    const auto a = std::get<0>(at::sort(chosen, -1));
    const auto b = std::get<0>(at::sort(ref.tensor("bf16.topk." + std::to_string(layer.index)), -1));
    same += a.eq(b).sum().item<int64_t>();
    total += a.numel();
  }
  EXPECT_GE(same * 100, total * 98) << same << " of " << total << " expert choices agree";
}

// Gradients of LoRA on the attention of every layer reach the earlier layers through the
// frozen routers and routing weights of the later ones. Every LoRA tensor of qtrain's has a
// reference gradient, and `tensors` of them are compared: all the reference has.
void check_adapter(const std::string& name, const std::string& adapter, const std::string& prefix, int64_t tensors) {
  const auto dir = test::moe_fixture(name);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), {});
  model::attach_lora(lm, io::load_peft_adapter(dir / adapter), (dir / adapter).string());
  schedule::LayerScheduler scheduler(lm);
  const auto ids = ref.tensor("ids");
  {
    const auto eval = scheduler.prepare_eval();
    EXPECT_LT(max_rel(lm.logits(scheduler.eval_hidden(eval, ids)), ref.tensor(prefix + "logits")), kLogitsTol);
  }
  const auto plan = scheduler.prepare_training(schedule::CheckpointPolicy::none);
  const auto [sum, count] = scheduler.train_forward(plan, ids, ref.tensor("labels"));
  const auto loss = sum / count;
  EXPECT_NEAR(loss.item<double>(), ref.tensor(prefix + "loss").item<double>(), kLossTol);
  loss.backward();
  int64_t compared = 0;
  for (const auto& [module, a] : model::lora_adapters(lm)) {
    for (auto [suffix, tensor] : {std::pair{".lora_A", a.a}, std::pair{".lora_B", a.b}}) {
      const auto expected = ref.tensor(prefix + "grad." + module + suffix);
      ASSERT_TRUE(tensor.grad().defined()) << module << suffix;
      EXPECT_LT(max_rel(tensor.grad(), expected), kGradTol) << name << " " << module << suffix;
      ++compared;
    }
  }
  EXPECT_EQ(compared, tensors);
  int64_t reference = 0;
  for (const auto& t : ref.tensors()) reference += t.name.rfind(prefix + "grad.", 0) == 0;
  EXPECT_EQ(compared, reference);
}

// LoRA tensors of an adapter on q, k, v, o (and on Gemma 4 the dense MLP's three linears) of
// every layer: v_proj is absent on Gemma 4's k_eq_v layers.
int64_t attention_lora_tensors(const std::string& name) {
  const auto config =
      model::ModelConfig::from_json(io::HfFolder::open(test::moe_fixture(name) / "base").config(), name);
  int64_t linears = 0;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    linears += config.attention(i).k_eq_v ? 3 : 4;
    if (config.arch == model::Architecture::gemma4) linears += 3;
  }
  return linears * 2;
}

int64_t sparse_layers(const std::string& name) {
  const auto config =
      model::ModelConfig::from_json(io::HfFolder::open(test::moe_fixture(name) / "base").config(), name);
  int64_t sparse = 0;
  for (int64_t i = 0; i < config.num_layers; ++i) sparse += config.layer_is_sparse(i);
  return sparse;
}

TEST_P(MoeParity, AttentionLoraGradientsFlowThroughTheRouter) {
  check_adapter(GetParam(), "adapter_attn", "attn.", attention_lora_tensors(GetParam()));
}

// Expert LoRA in PEFT's target_parameters layout: gate_up_proj's adapter nested as
// experts.base_layer, down_proj's as experts, B's columns expert-minor.
TEST_P(MoeParity, ExpertLoraLogitsLossAndGradientsMatchPeft) {
  check_adapter(GetParam(), "adapter", "lora.", attention_lora_tensors(GetParam()) + sparse_layers(GetParam()) * 2 * 2);
}

// peft's target_modules="all-linear": on Gemma 4 every linear but lm_head, the router's proj
// included (attention_lora_tensors counts the dense MLP); on Qwen3-MoE and Mixtral the attention
// and, on each sparse layer, the router's weight and both experts' parameters (gate_up_proj at
// twice r and alpha), as peft's conversion for these families rewrites it. The routers' adapters
// change which experts are chosen, and their gradients are peft's.
TEST_P(MoeParity, PeftsAllLinearAdapterWithTheRoutersLoadsAndTrainsAsInPeft) {
  const bool gemma4 = GetParam() == "gemma4_moe";
  check_adapter(GetParam(),
                "adapter_all",
                "all.",
                attention_lora_tensors(GetParam()) + sparse_layers(GetParam()) * (gemma4 ? 2 : 6));
}

// Only gate_up_proj targeted: one ParamWrapper, saved as "...mlp.experts" (no base_layer).
TEST(MoeExpertLora, GateUpAloneLoadsUnderPeftsSingleWrapperName) {
  check_adapter("qwen3_moe", "adapter_gate_up", "gate_up.", 3 * 4 * 2 + 2 * 2);
}

// The load-balancing loss (output_router_logits): its value, the loss with it, and the LoRA
// gradients of the aux loss alone (at the default coefficient, 0.001, they are below the tolerance
// of the total's), without padding and with the end of one row padded (transformers'
// attention_mask, which the aux loss alone reads), with checkpointing off and on. Attention LoRA
// after the last sparse layer gets no gradient from it.
void check_load_balancing(const std::string& name, const std::string& prefix, schedule::CheckpointPolicy policy) {
  const auto dir = test::moe_fixture(name);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  model::LoadOptions options;
  options.model_config = {{"output_router_logits", true}};
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), options);
  model::attach_lora(lm, io::load_peft_adapter(dir / "adapter"), (dir / "adapter").string());
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(policy);
  schedule::StepInputs in{ref.tensor("ids"), ref.tensor("labels"), {}, {}, {}};
  if (prefix == "auxpad.") in.attention_mask = ref.tensor("auxpad.mask");
  const auto r = scheduler.train_forward(plan, in);
  ASSERT_TRUE(scheduler.aux_loss().defined());
  EXPECT_NEAR(scheduler.aux_loss().item<double>(), ref.tensor(prefix + "aux_loss").item<double>(), kLossTol) << name;
  const double coef = lm.config().moe->router_aux_loss_coef;
  EXPECT_NEAR((r.loss_sum / r.tokens + coef * scheduler.aux_loss()).item<double>(),
              ref.tensor(prefix + "loss").item<double>(),
              kLossTol)
      << name;
  scheduler.aux_loss().backward();
  int64_t compared = 0;
  for (const auto& [module, a] : model::lora_adapters(lm)) {
    for (auto [suffix, tensor] : {std::pair{".lora_A", a.a}, std::pair{".lora_B", a.b}}) {
      const std::string key = prefix + "grad." + module + suffix;
      if (!ref.contains(key)) {
        EXPECT_TRUE(!tensor.grad().defined() || tensor.grad().abs().max().item<double>() == 0.0) << key;
        continue;
      }
      ASSERT_TRUE(tensor.grad().defined()) << key;
      EXPECT_LT(max_rel(tensor.grad(), ref.tensor(key)), kGradTol) << name << " " << key;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// transformers' Gemma 4 has no load-balancing loss, so its fixture has no reference for it.
class MoeLoadBalancingParity : public testing::TestWithParam<std::string> {};

TEST_P(MoeLoadBalancingParity, LoadBalancingLossAndItsGradientsMatchTransformers) {
  check_load_balancing(GetParam(), "aux.", schedule::CheckpointPolicy::none);
  check_load_balancing(GetParam(), "auxpad.", schedule::CheckpointPolicy::none);
  check_load_balancing(GetParam(), "auxpad.", schedule::CheckpointPolicy::every_layer);
}

// The config's default, output_router_logits false, adds no aux loss (transformers' default).
TEST(MoeLoadBalancing, OffUnlessOutputRouterLogits) {
  const auto dir = test::moe_fixture("mixtral");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), {});
  ASSERT_FALSE(lm.config().moe->output_router_logits);
  schedule::LayerScheduler scheduler(lm);
  scheduler.train_forward(
      scheduler.prepare_training(schedule::CheckpointPolicy::none), ref.tensor("ids"), ref.tensor("labels"));
  EXPECT_FALSE(scheduler.aux_loss().defined());
}

INSTANTIATE_TEST_SUITE_P(Families,
                         MoeParity,
                         testing::Values("qwen3_moe", "qwen3_moe_fused", "mixtral", "gemma4_moe"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Families,
                         MoeLoadBalancingParity,
                         testing::Values("qwen3_moe", "qwen3_moe_fused", "mixtral"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// Gemma 4's layers keep the dense MLP beside the experts, with the router, the three extra norms
// and the experts at layers.N.experts, and offload moves the experts with the rest of the layer.
TEST(Gemma4Moe, EveryLayerHasTheDenseMlpTheRouterAndTheExperts) {
  const auto lm = model::CausalLM::load(io::HfFolder::open(test::moe_fixture("gemma4_moe") / "base"), {});
  const auto& m = *lm.config().moe;
  EXPECT_EQ(m.num_experts, 6);
  EXPECT_EQ(m.top_k, 3);
  EXPECT_EQ(m.expert_intermediate_size, 20);
  for (const auto& layer : lm.layers()) {
    ASSERT_TRUE(layer.moe && layer.moe->gemma4_router) << layer.index;
    EXPECT_FALSE(layer.moe->router.defined());
    EXPECT_TRUE(layer.post_ff_norm_1 && layer.pre_ff_norm_2 && layer.post_ff_norm_2);
    EXPECT_EQ(layer.moe->experts.name, "model.layers." + std::to_string(layer.index) + ".experts");
    const int64_t attention = layer.v ? 4 : 3;
    ASSERT_EQ(layer.linears().size(), size_t(attention + 3));
    EXPECT_EQ(layer.linears().back()->name, "model.layers." + std::to_string(layer.index) + ".mlp.down_proj");
    EXPECT_EQ(layer.weight_linears().size(), size_t(attention + 3 + 2 * m.num_experts));
  }
}

// An adapter qtrain writes with `config` on the fixture `name` (`adapted` modules and parameters)
// loads in PEFT and means the same there, and qtrain reads it back.
void expect_written_adapter_means_the_same_in_peft(const std::string& name,
                                                   const lora::LoraConfig& config,
                                                   int64_t adapted) {
  const auto dir = test::moe_fixture(name);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), {});
  EXPECT_EQ(model::attach_new_lora(lm, config, 3), adapted);
  {
    at::NoGradGuard no_grad;
    at::manual_seed(4);
    for (auto& [name, a] : model::lora_adapters(lm)) a.b.normal_(0, 0.1);
  }
  const auto tmp = std::filesystem::temp_directory_path() / ("qtrain_moe_adapter_" + std::to_string(::getpid()));
  const auto peft_logits =
      test::peft_logits_of_written_adapter(dir / "base", config, model::lora_adapters(lm), ref.tensor("ids"), tmp);
  schedule::LayerScheduler scheduler(lm);
  const auto logits = lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ref.tensor("ids")));
  EXPECT_GT(max_rel(logits, ref.tensor("base.logits")), 1e-3);
  EXPECT_LT(max_rel(logits, peft_logits), kLogitsTol);
  // And qtrain reads it back to the same model.
  auto again = model::CausalLM::load(io::HfFolder::open(dir / "base"), {});
  model::attach_lora(again, io::load_peft_adapter(tmp / "adapter"), (tmp / "adapter").string());
  schedule::LayerScheduler again_scheduler(again);
  EXPECT_TRUE(
      at::equal(again.logits(again_scheduler.eval_hidden(again_scheduler.prepare_eval(), ref.tensor("ids"))), logits));
  qtrain::engine::io::remove_tree(tmp);
}

lora::LoraConfig q_and_experts() {
  lora::LoraConfig config;
  config.r = 3;
  config.alpha = 5;
  config.target_modules = {"q_proj"};
  config.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  return config;
}

// q_proj on 3 layers, and both experts' parameters, as nested wrappers, on the 2 sparse layers.
TEST(MoeAdapterInterop, AnExpertAdapterWrittenByQtrainGivesTheSameLogitsInPeft) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  expect_written_adapter_means_the_same_in_peft("qwen3_moe", q_and_experts(), 3 + 2 * 2);
}

// LoRA on the routers, both ways peft has (Note [Router LoRA]): Qwen3-MoE's router weight through
// target_parameters "gate.weight" (with q_proj and the experts), Gemma 4's router.proj as a
// target module ("proj", as peft's all-linear lists it) beside q_proj on its 5 layers.
TEST(MoeAdapterInterop, RouterAdaptersWrittenByQtrainMeanTheSameInPeft) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  auto qwen = q_and_experts();
  qwen.target_parameters.push_back("gate.weight");
  expect_written_adapter_means_the_same_in_peft("qwen3_moe", qwen, 3 + 2 * 3);
  lora::LoraConfig gemma4;
  gemma4.r = 3;
  gemma4.alpha = 5;
  gemma4.target_modules = {"q_proj", "proj"};
  expect_written_adapter_means_the_same_in_peft("gemma4_moe", gemma4, 5 + 5);
}

// The same with per-module ranks and alphas (rank_pattern, alpha_pattern): the experts'
// gate_up_proj at twice the rank and alpha (as peft's own conversion of a fused target writes),
// layer 2's q_proj at another rank and alpha.
TEST(MoeAdapterInterop, PerModuleRanksAndAlphasWrittenByQtrainMeanTheSameInPeft) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  auto config = q_and_experts();
  config.rank_pattern = {{".*\\.gate_up_proj", 6}, {"layers.2.self_attn.q_proj", 5}};
  config.alpha_pattern = {{".*\\.gate_up_proj", 10}, {"layers.2.self_attn.q_proj", 2}};
  expect_written_adapter_means_the_same_in_peft("qwen3_moe", config, 3 + 2 * 2);
}

// peft's rank_pattern and alpha_pattern read from its adapter: per-module ranks and scalings
// (q_proj at r 2, layer 2's o_proj at r 6, k_proj at alpha 3, the experts' gate_up_proj at r 8 and
// alpha 16), and the logits, loss and every LoRA gradient as peft computes them.
TEST(MoeExpertLora, PeftsPerModuleRanksAndAlphasLoadAndTrainAsInPeft) {
  check_adapter("qwen3_moe", "adapter_pattern", "pattern.", 3 * 4 * 2 + 2 * 2 * 2);
  const auto loaded = io::load_peft_adapter(test::moe_fixture("qwen3_moe") / "adapter_pattern");
  const auto& ads = loaded.adapters;
  EXPECT_EQ(ads.at("model.layers.0.self_attn.q_proj").rank(), 2);
  EXPECT_EQ(ads.at("model.layers.2.self_attn.o_proj").rank(), 6);
  EXPECT_EQ(ads.at("model.layers.1.self_attn.o_proj").rank(), 4);
  EXPECT_EQ(ads.at("model.layers.0.self_attn.k_proj").scaling, 3.0 / 4);
  EXPECT_EQ(ads.at("model.layers.0.self_attn.v_proj").scaling, 2.0);
  EXPECT_EQ(ads.at("model.layers.0.mlp.experts.base_layer").a.size(0), 8 * 8) << "gate_up_proj: r 8 per expert";
  EXPECT_EQ(ads.at("model.layers.0.mlp.experts.base_layer").scaling, 2.0);
  EXPECT_EQ(ads.at("model.layers.0.mlp.experts").a.size(0), 4 * 8) << "down_proj: r 4 per expert";
}

}  // namespace
}  // namespace qtrain::engine
