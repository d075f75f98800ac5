// Note [Adapters off]: under lora::AdaptersOff a model with its adapters computes what the base
// alone computes, bit for bit (the reference of DPO and KTO), on a dense model with LoRA and the
// embeddings and head trained in full, on MoE models whose routers and experts are adapted, and
// with the experts through the grouped kernel; the adapters compute again once the guard is gone.
#include "engine/lora/adapters_off.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/io/peft_adapter.h"
#include "engine/model/causal_lm.h"
#include "engine/model/lora_attach.h"
#include "engine/model/saved_modules.h"
#include "engine/schedule/layer_scheduler.h"
#include "tests/reference.h"

namespace qtrain::engine::model {
namespace {

at::Tensor logits_of(CausalLM& lm, const at::Tensor& ids) {
  schedule::LayerScheduler scheduler(lm);
  return lm.logits(scheduler.eval_hidden(scheduler.prepare_eval(), ids));
}

// `adapted` with the adapter folder `adapter` of `dir` (and, where `full`, fresh copies of the
// embeddings and head moved off the base) against the base loaded on its own.
void expect_base_under_guard(const std::filesystem::path& dir,
                             const std::string& adapter,
                             bool full,
                             const LoadOptions& options = {}) {
  SCOPED_TRACE(dir.string() + " " + adapter);
  const auto ref = io::SafetensorsFile::open(dir / "reference.safetensors");
  const auto ids = ref.tensor("ids");
  auto base = CausalLM::load(io::HfFolder::open(dir / "base"), options);
  auto adapted = CausalLM::load(io::HfFolder::open(dir / "base"), options);
  attach_lora(adapted, io::load_peft_adapter(dir / adapter), (dir / adapter).string());
  if (full) {
    lora::LoraConfig saved;
    saved.modules_to_save = {"embed_tokens", "lm_head"};
    attach_new_saved_modules(adapted, saved);
    at::NoGradGuard no_grad;
    adapted.trained_embed_tokens().add_(0.1);
    adapted.trained_lm_head().mul_(1.5);
  }
  const auto with = logits_of(adapted, ids);
  const auto plain = logits_of(base, ids);
  ASSERT_FALSE(at::allclose(with, plain, 1e-3, 1e-3)) << "the adapter must change the logits";
  {
    const lora::AdaptersOff off;
    EXPECT_FALSE(lora::adapters_on());
    EXPECT_TRUE(at::equal(logits_of(adapted, ids), plain));
  }
  EXPECT_TRUE(lora::adapters_on());
  EXPECT_TRUE(at::equal(logits_of(adapted, ids), with));
}

TEST(AdaptersOff, ADenseModelWithLoraAndModulesTrainedInFullComputesItsBase) {
  expect_base_under_guard(test::model_fixture("llama"), "adapter", /*full=*/true);
}

TEST(AdaptersOff, MoeModelsWithRouterAndExpertLoraComputeTheirBase) {
  for (const std::string name : {"qwen3_moe", "mixtral", "gemma4_moe"}) {
    expect_base_under_guard(test::moe_fixture(name), "adapter_all", /*full=*/false);
  }
  LoadOptions grouped;
  grouped.expert_kernel = ExpertKernel::grouped;
  expect_base_under_guard(test::moe_fixture("qwen3_moe"), "adapter_all", /*full=*/false, grouped);
}

TEST(AdaptersOff, GuardsNestAndRestoreWhatWasBefore) {
  {
    const lora::AdaptersOff outer;
    {
      const lora::AdaptersOff inner;
      EXPECT_FALSE(lora::adapters_on());
    }
    EXPECT_FALSE(lora::adapters_on());
  }
  EXPECT_TRUE(lora::adapters_on());
}

}  // namespace
}  // namespace qtrain::engine::model
