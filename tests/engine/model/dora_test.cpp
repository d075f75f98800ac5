// DoRA (peft_use_dora, Note [DoRA] in engine/lora/lora_linear.h) against transformers + peft +
// bitsandbytes on tiny Llama and Qwen2 models (Qwen2's q/k/v biases leave DoRA's base output):
// a DoRA adapter peft wrote gives peft's logits, loss and gradients of A, B and the magnitudes on
// float32, NF4 and INT8 bases (scripts/reference/model_reference.py, adapter_dora/, dora.*); a new
// one starts at the base's row norms, and written by qtrain means the same in peft; the merged
// weights give the adapter's logits; and with dropout the base output is recomputed from the
// dropped-out input, as peft does.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/lora/lora_linear.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/model/merged_weights.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/expect_error.h"
#include "tests/reference.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::model {
namespace {

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

struct Case {
  std::string arch;
  std::string quant;  // fp32 | nf4 | int8
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << "/" << c.quant; }
};

// As ModelParity's training runs: INT8 trains through a dequantized float matmul, as
// bitsandbytes' MatMul8bitFp does on the CPU.
LoadOptions options(const std::string& quant) {
  LoadOptions o;
  if (quant == "nf4") {
    o.quant.kind = QuantSpec::Kind::nf4;
    o.quant.double_quant = true;
  } else if (quant == "int8") {
    o.quant.kind = QuantSpec::Kind::int8;
    o.quant.int8_compute = ops::Int8Compute::dequantize;
    o.quant.int8_threshold = 6.0;
  }
  return o;
}

class DoraParity : public testing::TestWithParam<Case> {};

// Tolerances as ModelParity's (float32 on both sides, the same ops but for summation order).
TEST_P(DoraParity, LogitsLossAndGradientsMatchPeft) {
  const auto& [arch, quant] = GetParam();
  const auto dir = test::model_fixture(arch);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = CausalLM::load(io::HfFolder::open(dir / "base"), options(quant));
  const auto adapter = io::load_peft_adapter(dir / "adapter_dora");
  ASSERT_TRUE(adapter.config.use_dora);
  attach_lora(lm, adapter, (dir / "adapter_dora").string());
  schedule::LayerScheduler scheduler(lm);
  const auto ids = ref.tensor("ids");
  const auto p = "dora." + quant + ".";
  const auto logits = lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ids));
  EXPECT_LT(max_rel(logits, ref.tensor(p + "logits")), 2e-5);
  // The magnitudes matter: the same A and B without them give other logits.
  EXPECT_GT(max_rel(logits, ref.tensor(quant + ".logits")), 1e-3);
  const auto plan = scheduler.prepare_training(schedule::CheckpointPolicy::every_layer);
  const auto [sum, tokens] = scheduler.train_forward(plan, ids, ref.tensor("labels"));
  const auto loss = sum / tokens;
  EXPECT_NEAR(loss.item<double>(), ref.tensor(p + "loss").item<double>(), 2e-6);
  loss.backward();
  int64_t compared = 0;
  for (const auto& [module, a] : lora_adapters(lm)) {
    for (auto [name, tensor] :
         {std::pair{".lora_A", a.a}, std::pair{".lora_B", a.b}, std::pair{".lora_magnitude_vector", a.magnitude}}) {
      ASSERT_TRUE(tensor.defined() && tensor.grad().defined()) << module << name;
      EXPECT_LT(max_rel(tensor.grad(), ref.tensor(p + "grad." + module + name)), 1e-4) << module << name;
      ++compared;
    }
  }
  int64_t expected = 0;
  for (const auto& info : ref.tensors()) expected += info.name.rfind(p + "grad.", 0) == 0;
  EXPECT_EQ(compared, expected);
  EXPECT_EQ(expected, 3 * 7 * 3);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* arch : {"llama", "qwen2"}) {
    for (const char* quant : {"fp32", "nf4", "int8"}) out.push_back({arch, quant});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Bases, DoraParity, testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.arch + "_" + info.param.quant;
});

// A new DoRA adapter is a no-op whose magnitudes are the base's row norms; moved off them, the
// adapter qtrain writes gives the same logits in peft, reads back bitwise, and merges into
// weights that give those logits without an adapter.
TEST(DoraInterop, ANewAdapterWrittenAndMergedByQtrainMeansTheSameInPeft) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::model_fixture("qwen2");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  const auto folder = io::HfFolder::open(dir / "base");
  auto lm = CausalLM::load(folder, {});
  lora::LoraConfig config;
  config.target_modules = {"q_proj", "v_proj", "down_proj"};
  config.use_dora = true;
  EXPECT_EQ(attach_new_lora(lm, config, 3), 3 * 3);
  schedule::LayerScheduler scheduler(lm);
  const auto ids = ref.tensor("ids");
  auto logits = [&] { return lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ids)); };
  EXPECT_LT(max_rel(logits(), ref.tensor("fp32.logits")), 2e-5) << "a new adapter changes nothing";
  const auto& q = lm.layers()[0].q;
  EXPECT_TRUE(at::allclose(q.lora->magnitude, at::linalg_vector_norm(q.dense_weight(at::kFloat), 2, {1})));
  {
    at::NoGradGuard no_grad;
    at::manual_seed(4);
    for (auto& layer : lm.layers()) {
      for (auto* l : layer.linears()) {
        if (!l->lora) continue;
        l->lora->b.normal_(0, 0.1);
        l->lora->magnitude.mul_(1 + 0.1 * at::randn_like(l->lora->magnitude));
      }
    }
  }
  const auto ours = logits();
  EXPECT_GT(max_rel(ours, ref.tensor("fp32.logits")), 1e-3);
  const auto tmp = test::fresh_test_dir(/*create=*/true);
  const auto peft = test::peft_logits_of_written_adapter(dir / "base", config, lora_adapters(lm), ids, tmp);
  EXPECT_LT(max_rel(ours, peft), 2e-5);
  const auto back = io::load_peft_adapter(tmp / "adapter");
  for (const auto& [module, a] : lora_adapters(lm)) {
    EXPECT_TRUE(test::bitwise_equal(back.adapters.at(module).magnitude, a.magnitude.detach())) << module;
  }
  io::save_hf_folder(tmp / "merged", folder.config(), merged_tensors(lm, folder, at::kFloat));
  auto merged = CausalLM::load(io::HfFolder::open(tmp / "merged"), {});
  schedule::LayerScheduler merged_scheduler(merged);
  EXPECT_LT(max_rel(merged.logits(merged_scheduler.eval_hidden(merged_scheduler.prepare_eval(), ids)), ours), 2e-5);
  io::remove_tree(tmp);
}

// With dropout in training, peft's DoRA recomputes the base output from the dropped-out input
// (F.linear(dropout(x), W)); the mask is the one lora_delta would draw from the same state.
TEST(DoraOutput, WithDropoutTheBaseTermUsesTheDroppedInput) {
  at::manual_seed(1);
  const auto w = at::randn({6, 5}), bias = at::randn({6}), x = at::randn({3, 5});
  lora::LoraAdapter a{.a = at::randn({2, 5}), .b = at::randn({6, 2}), .scaling = 0.5, .dropout = 0.4};
  a.magnitude = at::linalg_vector_norm(w, 2, {1}) * 1.3;
  const auto base_out = at::linear(x, w, bias);
  at::manual_seed(9);
  const auto got = lora::dora_output(x, base_out, w, bias, a, /*training=*/true);
  at::manual_seed(9);
  const auto h = at::dropout(x, 0.4, true);
  const auto norm = at::linalg_vector_norm(w + at::matmul(a.b, a.a) * 0.5, 2, {1});
  const auto s = (a.magnitude / norm).view({1, -1});
  const auto want = base_out + (s - 1) * at::linear(h, w) + s * at::linear(at::linear(h, a.a), a.b) * 0.5;
  EXPECT_LT(max_rel(got, want), 1e-6);
  // Without training the base term is the base output less its bias.
  const auto eval = lora::dora_output(x, base_out, w, bias, a, /*training=*/false);
  const auto want_eval = base_out + (s - 1) * (base_out - bias) + s * at::linear(at::linear(x, a.a), a.b) * 0.5;
  EXPECT_LT(max_rel(eval, want_eval), 1e-6);
}

TEST(DoraConfig, DoraOnParametersIsRefusedAsPeftRefusesIt) {
  lora::LoraConfig config;
  config.target_parameters = {"mlp.experts.gate_up_proj"};
  config.use_dora = true;
  test::expect_error([&] { config.validate("run.yaml"); }, "run.yaml: DoRA (use_dora) with LoRA on parameters");
}

}  // namespace
}  // namespace qtrain::engine::model
