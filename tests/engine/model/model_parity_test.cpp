// Parity with transformers (+ peft, + bitsandbytes on the CPU) on tiny random models of every
// supported architecture: logits and loss of the base in float32, NF4 and INT8, and with a PEFT
// adapter also the gradient of every LoRA tensor. References: scripts/reference/model_reference.py
// and, for Gemma 4, scripts/reference/gemma4_reference.py.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/reference.h"

namespace qtrain::engine {
namespace {

using model::QuantSpec;

struct Case {
  std::string arch;
  std::string quant;  // fp32 | nf4 | int8
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << "/" << c.quant; }
};

QuantSpec spec(const std::string& quant, bool training) {
  QuantSpec s;
  if (quant == "nf4") {
    s.kind = QuantSpec::Kind::nf4;
    s.double_quant = true;
  } else if (quant == "int8") {
    s.kind = QuantSpec::Kind::int8;
    // transformers evaluates Linear8bitLt through MatMul8bitLt (int8 matmul, threshold 6) and, on
    // the CPU, trains through MatMul8bitFp (dequantize + float matmul).
    s.int8_compute = training ? ops::Int8Compute::dequantize : ops::Int8Compute::llm_int8;
    s.int8_threshold = 6.0;
  }
  return s;
}

// The model in float32 on the CPU with `quant`.
model::LoadOptions float32_options(const QuantSpec& quant) {
  model::LoadOptions options;
  options.quant = quant;
  return options;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

// Tolerances, float32 throughout. Both sides run the same float32 ops on the same weights (the
// quantized bytes are identical, tests/ops/quant), so they differ only by summation order in
// matmuls and attention: ~1e-6 relative. The LoRA gradients pass backward through three
// layers and softmax: 1e-4 of the largest gradient.
// INT8 evaluation (LLM.int8() with outlier decomposition) is compared twice. bitsandbytes' CPU
// backend rescales the int8 product by 6.200124e-05, a typo of 1/127^2 = 6.2000124e-05 (1.8e-5
// relative); qtrain uses the exact constant, as bitsandbytes' CUDA kernel does. Against
// bitsandbytes with the constant corrected ("int8_exact", see model_reference.py) the usual
// float32 tolerance holds. Against bitsandbytes as shipped, each layer's output differs by
// ~2e-5, and the next layer's int8 quantization of its input turns that into one-code flips
// (1/127 of a row's absmax) that add up over the layers: ~1% on these small random models.
// None of this depends on the CPU: the int8 products are exact integers on both sides (the
// oracle computes them exactly, scripts/reference/bnb_oracle.py; bitsandbytes' own CPU paths,
// torch._int_mm with AVX-512 and a float32 matmul without, agree with that for K <= 1040, and K
// is at most 96 here). bitsandbytes as shipped and corrected differ from each other by as much
// (the fixtures' int8.logits against int8_exact.logits): 1.2-2.3% of the largest logit on the
// Llama-family and Gemma 3 models, 3.9% on Gemma 2 and Gemma 4, whose largest logits are 1.43 and
// 1.80 (under their caps of 1.5 and 2.0) against 2.2-2.9 on the others.
double logits_tol(const std::string& quant, const std::string& arch) {
  if (quant != "int8") return 2e-5;
  return arch == "gemma2" || arch == "gemma4" ? 6e-2 : 3e-2;
}

class ModelParity : public testing::TestWithParam<Case> {};

TEST_P(ModelParity, LogitsAndLossMatchTransformers) {
  const auto& [arch, quant] = GetParam();
  const auto dir = test::model_fixture(arch);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  const auto folder = io::HfFolder::open(dir / "base");
  auto lm = model::CausalLM::load(folder, float32_options(spec(quant, false)));
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  const auto ids = ref.tensor("ids");
  const auto logits = lm.logits(scheduler.eval_hidden(plan, ids));
  EXPECT_LT(max_rel(logits, ref.tensor(quant + ".logits")), logits_tol(quant, arch)) << arch << " " << quant;
  const auto [sum, tokens] = scheduler.eval_loss(plan, ids, ref.tensor("labels"));
  EXPECT_EQ(tokens, 39);  // 2 x 23 predicted positions, minus labels 1..4 of row 0 and the last 3 of row 1
  EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor(quant + ".loss").item<double>(), quant == "int8" ? 5e-3 : 2e-6);
  if (quant == "int8") {
    EXPECT_LT(max_rel(logits, ref.tensor("int8_exact.logits")), 2e-5) << arch;
    EXPECT_NEAR((sum / tokens).item<double>(), ref.tensor("int8_exact.loss").item<double>(), 2e-6) << arch;
  }
}

TEST_P(ModelParity, AdapterLogitsLossAndLoraGradientsMatchPeft) {
  const auto& [arch, quant] = GetParam();
  const auto dir = test::model_fixture(arch);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), float32_options(spec(quant, true)));
  model::attach_lora(lm, io::load_peft_adapter(dir / "adapter"), (dir / "adapter").string());
  schedule::LayerScheduler scheduler(lm);
  const auto ids = ref.tensor("ids");
  const auto p = quant + ".lora.";
  {
    const auto eval = scheduler.prepare_eval();
    EXPECT_LT(max_rel(lm.logits(scheduler.eval_hidden(eval, ids)), ref.tensor(p + "logits")), 2e-5) << arch;
  }
  const auto plan = scheduler.prepare_training(schedule::CheckpointPolicy::none);
  const auto [sum, tokens] = scheduler.train_forward(plan, ids, ref.tensor("labels"));
  const auto loss = sum / tokens;
  EXPECT_NEAR(loss.item<double>(), ref.tensor(p + "loss").item<double>(), 2e-6) << arch << " " << quant;
  loss.backward();
  int64_t compared = 0;
  for (const auto& [module, adapter] : model::lora_adapters(lm)) {
    for (auto [name, tensor] : {std::pair{".lora_A", adapter.a}, std::pair{".lora_B", adapter.b}}) {
      const auto expected = ref.tensor(p + "grad." + module + name);
      ASSERT_TRUE(tensor.grad().defined()) << module << name;
      EXPECT_LT(max_rel(tensor.grad(), expected), 1e-4) << arch << " " << quant << " " << module << name;
      ++compared;
    }
  }
  // Every adapted linear of the reference (3 layers x 7; Gemma 4's fixture has 5 layers, two
  // without v_proj) has its counterpart here.
  int64_t expected = 0;
  for (const auto& info : ref.tensors()) expected += info.name.rfind(p + "grad.", 0) == 0;
  EXPECT_EQ(compared, expected);
  EXPECT_EQ(expected, arch == "gemma4" ? (5 * 7 - 2) * 2 : 3 * 7 * 2);
}

TEST(AdapterInterop, AnAdapterWrittenByQtrainGivesTheSameLogitsInPeft) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::model_fixture("qwen2");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "base"), {});
  lora::LoraConfig config;
  config.r = 8;
  config.alpha = 16;
  config.use_rslora = true;
  config.target_modules = {"q_proj", "v_proj", "down_proj"};
  EXPECT_EQ(model::attach_new_lora(lm, config, 3), 3 * 3);
  {
    at::NoGradGuard no_grad;
    at::manual_seed(4);
    for (auto& [name, a] : model::lora_adapters(lm)) a.b.normal_(0, 0.1);
  }
  const auto tmp = std::filesystem::temp_directory_path() / ("qtrain_adapter_" + std::to_string(::getpid()));
  const auto peft_logits =
      test::peft_logits_of_written_adapter(dir / "base", config, model::lora_adapters(lm), ref.tensor("ids"), tmp);
  schedule::LayerScheduler scheduler(lm);
  const auto logits = lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ref.tensor("ids")));
  // The adapter must matter (B is non-zero), and peft must apply it exactly as qtrain does.
  EXPECT_GT(max_rel(logits, ref.tensor("fp32.logits")), 1e-3);
  EXPECT_LT(max_rel(logits, peft_logits), 2e-5);
  qtrain::engine::io::remove_tree(tmp);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4"}) {
    for (const char* quant : {"fp32", "nf4", "int8"}) out.push_back({arch, quant});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Architectures,
                         ModelParity,
                         testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& info) {
                           return info.param.arch + "_" + info.param.quant;
                         });

}  // namespace
}  // namespace qtrain::engine
