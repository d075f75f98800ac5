// The embeddings, output head and norms trained in full (PEFT's modules_to_save) against
// transformers + peft on tiny Llama (untied) and Qwen3 (tied embeddings, q/k norms) models in
// float32: an adapter peft wrote loads with its copies, and the logits, loss and every gradient
// (LoRA and the copies) match; an adapter qtrain writes means the same in peft. References:
// scripts/reference/model_reference.py (adapter_saved/, saved.*).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/model/saved_modules.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

// An architecture and the modules its adapter_saved trains in full: llama's modules_to_save
// [embed_tokens, lm_head, input_layernorm, model.norm] name 2 + 3 + 1, qwen3's [embed_tokens,
// lm_head, norm] 2 + 3 x 4 + 1 (peft's suffix rule: every norm).
struct SavedCase {
  std::string arch;
  size_t modules;
};

class SavedModules : public ::testing::TestWithParam<SavedCase> {};

// float32 on both sides, the same ops: logits to 2e-5 and the loss to 2e-6 as the other adapter
// parity tests; gradients to 1e-4 of their largest element (the embeddings' gradient is a sum of
// scattered rows, the head's a [V, H] product over every token).
TEST_P(SavedModules, PeftsModulesToSaveLoadAndTrainAsInPeft) {
  const auto dir = test::model_fixture(GetParam().arch);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = CausalLM::load(io::HfFolder::open(dir / "base"), {});
  const auto adapter = io::load_peft_adapter(dir / "adapter_saved");
  ASSERT_EQ(adapter.saved_modules.size(), GetParam().modules);
  attach_lora(lm, adapter, (dir / "adapter_saved").string());
  ASSERT_TRUE(lm.trained_embed_tokens().defined() && lm.trained_lm_head().defined());
  EXPECT_EQ(lm.trained_norms().size(), GetParam().modules - 2);
  EXPECT_TRUE(lm.trained_norms().count("model.norm"));
  // The copies were moved off the base, each its own way (qwen3's tied embedding into two).
  EXPECT_FALSE(at::equal(lm.trained_embed_tokens(), lm.embed_tokens()));
  EXPECT_FALSE(at::equal(lm.trained_lm_head(), lm.trained_embed_tokens()));
  schedule::LayerScheduler scheduler(lm);
  const auto ids = ref.tensor("ids");
  EXPECT_LT(max_rel(lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ids)), ref.tensor("saved.logits")), 2e-5);
  const auto plan = scheduler.prepare_training(schedule::CheckpointPolicy::every_layer);
  const auto [sum, tokens] = scheduler.train_forward(plan, ids, ref.tensor("labels"));
  const auto loss = sum / tokens;
  EXPECT_NEAR(loss.item<double>(), ref.tensor("saved.loss").item<double>(), 2e-6);
  loss.backward();
  int64_t compared = 0;
  for (const auto& [module, a] : lora_adapters(lm)) {
    for (auto [name, tensor] : {std::pair{".lora_A", a.a}, std::pair{".lora_B", a.b}}) {
      ASSERT_TRUE(tensor.grad().defined()) << module << name;
      EXPECT_LT(max_rel(tensor.grad(), ref.tensor("saved.grad." + module + name)), 1e-4) << module << name;
      ++compared;
    }
  }
  for (const auto& [module, weight] : saved_modules(lm)) {
    ASSERT_TRUE(weight.grad().defined()) << module;
    EXPECT_LT(max_rel(weight.grad(), ref.tensor("saved.grad." + module)), 1e-4) << module;
    ++compared;
  }
  int64_t expected = 0;
  for (const auto& info : ref.tensors()) expected += info.name.rfind("saved.grad.", 0) == 0;
  EXPECT_EQ(compared, expected);
  EXPECT_EQ(expected, 3 * 7 * 2 + static_cast<int64_t>(GetParam().modules));
}

INSTANTIATE_TEST_SUITE_P(UntiedAndTied,
                         SavedModules,
                         ::testing::Values(SavedCase{"llama", 6}, SavedCase{"qwen3", 15}),
                         [](const auto& info) { return info.param.arch; });

// Fresh copies start as the base's (both from the one tied embedding on qwen3) and train apart;
// an adapter qtrain writes with them loads in peft to the same logits, and qtrain reads it back.
TEST(SavedModulesInterop, AnAdapterWrittenByQtrainWithItsCopiesMeansTheSameInPeft) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::model_fixture("qwen3");
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  auto lm = CausalLM::load(io::HfFolder::open(dir / "base"), {});
  lora::LoraConfig config;
  config.target_modules = {"q_proj"};
  config.modules_to_save = {"embed_tokens", "lm_head", "self_attn.k_norm", "model.layers.1.post_attention_layernorm"};
  const auto frozen_k_norm = lm.layers()[2].k_norm->clone();
  attach_new_lora(lm, config, 3);
  EXPECT_TRUE(at::equal(lm.trained_embed_tokens(), lm.embed_tokens()));
  EXPECT_TRUE(at::equal(lm.trained_lm_head(), lm.embed_tokens()));
  ASSERT_EQ(lm.trained_norms().size(), 4u);  // three layers' k_norm, one post_attention_layernorm
  EXPECT_TRUE(at::equal(lm.trained_norms().at("model.layers.2.self_attn.k_norm"), frozen_k_norm));
  {
    at::NoGradGuard no_grad;
    at::manual_seed(4);
    for (auto& [name, a] : lora_adapters(lm)) a.b.normal_(0, 0.1);
    lm.trained_embed_tokens().add_(at::randn_like(lm.trained_embed_tokens()) * 0.05);
    lm.trained_lm_head().add_(at::randn_like(lm.trained_lm_head()) * 0.05);
    for (const auto& [module, weight] : lm.trained_norms()) weight.add_(at::randn_like(weight) * 0.3);
  }
  // The layers compute with the trained norms.
  EXPECT_TRUE(lm.layers()[2].k_norm->is_same(lm.trained_norms().at("model.layers.2.self_attn.k_norm")));
  const auto tmp = std::filesystem::temp_directory_path() / ("qtrain_saved_modules_" + std::to_string(::getpid()));
  const auto peft_logits = test::peft_logits_of_written_adapter(
      dir / "base", config, lora_adapters(lm), ref.tensor("ids"), tmp, saved_modules(lm));
  schedule::LayerScheduler scheduler(lm);
  const auto logits = lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ref.tensor("ids")));
  EXPECT_LT(max_rel(logits, peft_logits), 2e-5);
  auto again = CausalLM::load(io::HfFolder::open(dir / "base"), {});
  attach_lora(again, io::load_peft_adapter(tmp / "adapter"), (tmp / "adapter").string());
  EXPECT_TRUE(at::equal(again.trained_embed_tokens(), lm.trained_embed_tokens()));
  EXPECT_TRUE(at::equal(again.trained_lm_head(), lm.trained_lm_head()));
  ASSERT_EQ(again.trained_norms().size(), lm.trained_norms().size());
  for (const auto& [module, weight] : lm.trained_norms()) {
    EXPECT_TRUE(at::equal(again.trained_norms().at(module), weight)) << module;
  }
  io::remove_tree(tmp);
}

TEST(SavedModulesInterop, OnlyTheEmbeddingsTheHeadAndNormsCanBeTrainedInFull) {
  auto lm = CausalLM::load(io::HfFolder::open(test::model_fixture("llama") / "base"), {});
  lora::LoraConfig config;
  config.target_modules = {"q_proj"};
  config.modules_to_save = {"mlp"};
  test::expect_error([&] { attach_new_lora(lm, config, 3); },
                     "modules_to_save names 'mlp'; qtrain trains the token embeddings, the output head and the "
                     "norms in full");
  for (const std::string entry : {"model.lm_head", "model.layers.7.input_layernorm"}) {
    config.modules_to_save = {entry};
    test::expect_error([&] { attach_new_saved_modules(lm, config); },
                       "modules_to_save names '" + entry +
                           "', which ends no path of this model's token embeddings (model.embed_tokens), output head "
                           "(lm_head) or norms (model.layers.0.input_layernorm, ..., model.norm)");
  }
}

}  // namespace
}  // namespace qtrain::engine::model
