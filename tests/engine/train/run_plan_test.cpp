// Tests for engine/train/run_plan's longest_sequence_len on Llama-3.1-8B's shapes (QLoRA r 32 on
// every linear layer, 24 GiB): the length it returns fits and one step of 256 more does not, with
// and without activation offloading, and offloading the activations makes it longer; a preference
// run's pairs count as two rows each.
#include "engine/train/run_plan.h"

#include <gtest/gtest.h>

#include "engine/model/init_model.h"

namespace qtrain::engine::train {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

config::RunConfig qlora_8b(bool offload_activations) {
  return config::parse_run_config(std::string("base_model: model\nload_in_4bit: true\nadapter: qlora\nlora_r: 32\n"
                                              "lora_target_linear: true\nmicro_batch_size: 1\nbf16: auto\n"
                                              "gradient_checkpointing: true\nactivation_offloading: ") +
                                      (offload_activations ? "true" : "false") + "\n",
                                  "run.yaml",
                                  "/tmp");
}

TEST(LongestSequenceLen, TheLongestLengthFitsAndOneStepMoreDoesNot) {
  const auto model = model::preset_config(model::Architecture::llama, "llama3-8b");
  int64_t kept = 0;
  for (const bool offloaded : {false, true}) {
    SCOPED_TRACE(offloaded ? "activations offloaded" : "activations kept");
    auto c = qlora_8b(offloaded);
    const int64_t n = longest_sequence_len(c, model, 24 * kGiB);
    ASSERT_GT(n, 0);
    EXPECT_EQ(n % 256, 0);
    c.sequence_len = n;
    EXPECT_TRUE(plan_run(c, model, 24 * kGiB).fits);
    c.sequence_len = n + 256;
    EXPECT_FALSE(plan_run(c, model, 24 * kGiB).fits);
    if (offloaded) {
      EXPECT_GT(n, kept + kept / 4) << "offloading the checkpointed inputs buys at least a quarter more";
    }
    kept = n;
  }
  EXPECT_EQ(longest_sequence_len(qlora_8b(false), model, 4 * kGiB), 0) << "the weights alone do not fit 4 GiB";
}

// A preference run's micro-batch of B pairs is 2B rows: its plan is a supervised plan of 2B rows
// (the same activations and transients), and so its longest sequence is shorter.
TEST(PreferencePlan, APairCountsAsTwoRows) {
  const auto model = model::preset_config(model::Architecture::llama, "llama3-8b");
  auto sft = qlora_8b(false);
  sft.sequence_len = 4096;
  auto dpo = sft;
  dpo.rl = "dpo";
  sft.micro_batch_size = 2;
  const auto rows = plan_run(sft, model, 24 * kGiB), pairs = plan_run(dpo, model, 24 * kGiB);
  EXPECT_EQ(pairs.allocated_bytes, rows.allocated_bytes);
  EXPECT_EQ(pairs.activation_bytes, rows.activation_bytes);
  sft.micro_batch_size = 1;
  EXPECT_GT(pairs.activation_bytes, plan_run(sft, model, 24 * kGiB).activation_bytes);
  EXPECT_LT(longest_sequence_len(dpo, model, 24 * kGiB), longest_sequence_len(sft, model, 24 * kGiB));
}

// DPO continuing an adapter holds a copy of the trainable tensors as its reference (Note
// [Reference adapter]): the plan counts their float32 bytes once more, 4 bytes for each of the
// 83,886,080 LoRA parameters of r 32 on every linear of Llama-3-8B's 32 layers (per layer
// 32 * (8192 + 5120 + 5120 + 8192 + 3 * 18432)); a new adapter's reference needs none.
TEST(PreferencePlan, ContinuingAnAdapterCountsTheReferenceCopy) {
  const auto model = model::preset_config(model::Architecture::llama, "llama3-8b");
  auto dpo = qlora_8b(false);
  dpo.rl = "dpo";
  auto continued = dpo;
  continued.lora_model_dir = "adapter";
  EXPECT_EQ(plan_run(continued, model, 24 * kGiB).allocated_bytes - plan_run(dpo, model, 24 * kGiB).allocated_bytes,
            int64_t{83886080} * 4);
  auto orpo = continued;
  orpo.rl = "orpo";
  auto fresh_orpo = dpo;
  fresh_orpo.rl = "orpo";
  EXPECT_EQ(plan_run(orpo, model, 24 * kGiB).allocated_bytes, plan_run(fresh_orpo, model, 24 * kGiB).allocated_bytes)
      << "ORPO has no reference";
}

}  // namespace
}  // namespace qtrain::engine::train
