// lora_target_linear adapts what peft's all-linear adapts, on every architecture qtrain reads,
// and explicit target lists on Qwen3-MoE and Mixtral are rewritten as peft rewrites them (Note
// [peft's MoE target conversion]). Oracle: scripts/reference/all_linear_targets.py (peft 0.21.2's
// get_peft_model on the fixtures' bases).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/model/peft_targets.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

using Shapes = std::map<std::string, std::vector<int64_t>>;

lora::LoraConfig all_linear() {
  lora::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.target_all_linear = true;
  return c;
}

ModelConfig config_of(const std::filesystem::path& base) {
  return ModelConfig::from_json(io::HfFolder::open(base).config(), base.string());
}

// The adapter's tensors as peft's save_pretrained names them, with their shapes.
Shapes adapter_shapes(const std::map<std::string, lora::LoraAdapter>& adapters) {
  Shapes out;
  for (const auto& [module, a] : adapters) {
    const std::string key = std::string(io::kPeftKeyPrefix) + module;
    out[key + ".lora_A.weight"] = a.a.sizes().vec();
    out[key + ".lora_B.weight"] = a.b.sizes().vec();
  }
  return out;
}

// Every dense family, and the mixture-of-experts ones: their all-linear tensors and resolved
// config, peft's against qtrain's.
TEST(PeftTargets, AllLinearAdaptsWhatPeftsAllLinearAdaptsOnEveryArchitecture) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (python == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  std::vector<std::filesystem::path> bases;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4"})
    bases.push_back(test::model_fixture(arch) / "base");
  for (const char* name : {"qwen3_moe", "qwen3_moe_fused", "mixtral", "gemma4_moe"})
    bases.push_back(test::moe_fixture(name) / "base");
  const auto out =
      std::filesystem::temp_directory_path() / ("qtrain_all_linear_" + std::to_string(::getpid()) + ".json");
  std::string cmd = std::string(python) + " " +
                    (std::filesystem::path(QTRAIN_SOURCE_DIR) / "scripts/reference/all_linear_targets.py").string() +
                    " " + out.string();
  for (const auto& b : bases) cmd += " " + b.string();
  ASSERT_EQ(std::system((cmd + " 2>/dev/null").c_str()), 0) << cmd;
  const auto peft = nlohmann::json::parse(std::ifstream(out));
  std::filesystem::remove(out);
  for (const auto& base : bases) {
    SCOPED_TRACE(base.string());
    const auto& want = peft.at(base.string());
    auto lm = CausalLM::load(io::HfFolder::open(base), {});
    const auto config = peft_targets(all_linear(), lm.config(), "test");
    attach_new_lora(lm, config, 1);
    EXPECT_EQ(adapter_shapes(lora_adapters(lm)), want.at("tensors").get<Shapes>());
    // The resolved config: what peft writes into adapter_config.json, and what a dense family's
    // all-linear matches (every linear but lm_head, left as the flag).
    if (config.target_all_linear) {
      EXPECT_TRUE(config.target_parameters.empty() && config.rank_pattern.empty());
      continue;
    }
    EXPECT_EQ(std::set<std::string>(config.target_modules.begin(), config.target_modules.end()),
              want.at("target_modules").get<std::set<std::string>>());
    EXPECT_EQ(std::set<std::string>(config.target_parameters.begin(), config.target_parameters.end()),
              want.at("target_parameters").get<std::set<std::string>>());
    EXPECT_EQ(nlohmann::json(std::map<std::string, int64_t>(config.rank_pattern.begin(), config.rank_pattern.end())),
              want.at("rank_pattern"));
    std::map<std::string, double> alphas(config.alpha_pattern.begin(), config.alpha_pattern.end());
    EXPECT_EQ(nlohmann::json(alphas), want.at("alpha_pattern"));
  }
}

// A list naming transformers 4's linears of the experts and router becomes their parameters,
// gate_proj with up_proj doubling gate_up_proj's rank and alpha; the other entries stay modules.
TEST(PeftTargets, OldExpertAndRouterNamesBecomeParametersOnQwen3MoeAndMixtral) {
  lora::LoraConfig c;
  c.r = 8;
  c.alpha = 16;
  c.target_modules = {"q_proj", "mlp.gate_proj", "up_proj", "down_proj", "gate"};
  const auto qwen = peft_targets(c, config_of(test::moe_fixture("qwen3_moe") / "base"), "test");
  EXPECT_EQ(qwen.target_modules, std::vector<std::string>{"q_proj"});
  EXPECT_EQ(std::set<std::string>(qwen.target_parameters.begin(), qwen.target_parameters.end()),
            (std::set<std::string>{"gate.weight", "gate_up_proj", "down_proj"}));
  EXPECT_EQ(qwen.rank_for("model.layers.0.mlp.experts.gate_up_proj"), 16);
  EXPECT_EQ(qwen.alpha_for("model.layers.0.mlp.experts.gate_up_proj"), 32);
  EXPECT_EQ(qwen.rank_for("model.layers.0.mlp.experts.down_proj"), 8);
  // Mixtral's are w1, w3 and w2; its gate_proj is no name of it and stays a module name.
  lora::LoraConfig m = c;
  m.target_modules = {"w1", "w3", "w2", "o_proj"};
  const auto mixtral = peft_targets(m, config_of(test::moe_fixture("mixtral") / "base"), "test");
  EXPECT_EQ(mixtral.target_modules, std::vector<std::string>{"o_proj"});
  EXPECT_EQ(std::set<std::string>(mixtral.target_parameters.begin(), mixtral.target_parameters.end()),
            (std::set<std::string>{"gate_up_proj", "down_proj"}));
  EXPECT_EQ(mixtral.rank_for("model.layers.0.mlp.experts.gate_up_proj"), 16);
  // Dense families and Gemma 4 are left as they are.
  for (const auto& base : {test::model_fixture("llama") / "base", test::moe_fixture("gemma4_moe") / "base"}) {
    const auto same = peft_targets(c, config_of(base), "test");
    EXPECT_EQ(same.target_modules, c.target_modules);
    EXPECT_TRUE(same.target_parameters.empty() && same.rank_pattern.empty());
  }
}

TEST(PeftTargets, HalfOfTheFusedGateUpIsRefusedAsPeftRefusesIt) {
  lora::LoraConfig c;
  c.target_modules = {"q_proj", "gate_proj"};
  test::expect_error([&] { peft_targets(c, config_of(test::moe_fixture("qwen3_moe") / "base"), "run.yaml"); },
                     "run.yaml: LoRA targets gate_proj but not up_proj; on qwen3_moe the two are one fused parameter");
}

// peft refuses dropout on its ParamWrapper, so all-linear with dropout on these families too.
TEST(PeftTargets, AllLinearWithDropoutIsRefusedWhereItAdaptsParameters) {
  auto c = all_linear();
  c.dropout = 0.05;
  test::expect_error([&] { peft_targets(c, config_of(test::moe_fixture("mixtral") / "base"), "run.yaml"); },
                     "run.yaml: lora_dropout is 0.05, but on mixtral lora_target_linear (peft's all-linear) adapts the "
                     "routers and experts as parameters");
  EXPECT_TRUE(peft_targets(c, config_of(test::moe_fixture("gemma4_moe") / "base"), "run.yaml").target_all_linear);
}

}  // namespace
}  // namespace qtrain::engine::model
