// The device values a training step reads on the host (Note [Host reads] in ops/host_read.h), by
// site, per optimizer step that does not log: the difference between a 4-step and a 2-step run of
// the same config (the setup's reads and the last step's logging are the same in both). Each read
// is a stream synchronize on CUDA; issue 26 takes them out of the step, and this test says which
// remain (a new one fails it). Beside them, the reads one step late (Note [Lagged reads]), which
// wait for the end of the previous step only.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"
#include "engine/io/remove_tree.h"
#include "engine/train/trainer.h"
#include "ops/host_read.h"
#include "tests/reference.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

using Reads = std::map<std::string, int64_t>;

class HostReads : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir(/*create=*/true);
    // Six pre-tokenized rows of 24 tokens within every fixture's vocabulary, and six pairs.
    at::manual_seed(5);
    const auto ids = [](int64_t n) {
      const auto t = at::randint(0, 100, {n}, at::kLong);
      return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
    };
    std::ofstream data(dir_ / "data.jsonl");
    std::ofstream pairs(dir_ / "pairs.jsonl");
    for (int i = 0; i < 6; ++i) {
      const auto v = ids(24);
      data << nlohmann::json{{"input_ids", v}, {"labels", v}}.dump() << "\n";
      pairs
          << nlohmann::json{{"prompt_ids", ids(5 + i)}, {"chosen_ids", ids(3 + i % 2)}, {"rejected_ids", ids(4)}}.dump()
          << "\n";
    }
  }
  void TearDown() override { io::remove_tree(dir_); }

  struct StepReads {
    Reads blocking;  // ops::host_reads
    Reads lagged;    // ops::lagged_reads
  };

  // The reads per non-logging step of the config `yaml` (base_model and the run's shape), by site.
  StepReads per_step(const std::string& yaml) const {
    const auto difference = [](Reads after, const Reads& before) {
      for (const auto& [site, n] : before) after[site] -= n;
      return after;
    };
    auto run = [&](int64_t steps) {
      const auto file = dir_ / ("run" + std::to_string(steps) + ".yaml");
      const bool preference = yaml.find("rl: ") != std::string::npos;
      std::ofstream(file) << yaml << "datasets:\n  - path: " << (preference ? "pairs.jsonl" : "data.jsonl")
                          << "\nsequence_len: 32\nlearning_rate: 0.001\n"
                          << "device: cpu\nseed: 3\nlogging_steps: 1000\nmax_steps: " << steps << "\noutput_dir: out"
                          << steps << "\n";
      const auto blocking = ops::host_reads();
      const auto lagged = ops::lagged_reads();
      train(config::load_run_config(file, {}));
      return StepReads{difference(ops::host_reads(), blocking), difference(ops::lagged_reads(), lagged)};
    };
    const auto four = run(4), two = run(2);
    const auto per_step = [](const Reads& four, const Reads& two) {
      Reads out;
      for (const auto& [site, n] : [&] {
             auto d = four;
             for (const auto& [s, m] : two) d[s] -= m;
             return d;
           }()) {
        EXPECT_EQ(n % 2, 0) << site;
        if (n != 0) out[site] = n / 2;
      }
      return out;
    };
    return {per_step(four.blocking, two.blocking), per_step(four.lagged, two.lagged)};
  }

  fs::path dir_;
};

// Every step's values read one step late: whether it applied, a stop request, its loss (Note
// [Steps decided on the device] in engine/train/trainer.cpp).
const Reads kLagged = {{"step: applied, stop request and loss", 1}};

// A dense model, two micro-batches per step: no read (token ids and labels are checked, and the
// predicted tokens counted, where the batch is host data; the loss, the gradients' finiteness and
// norm stay on the device until a step logs).
TEST_F(HostReads, ADenseStepReadsNothing) {
  const auto base = test::model_fixture("llama");
  const auto reads = per_step("base_model: " + (base / "base").string() +
                              "\nadapter: lora\nlora_r: 4\nlora_target_linear: true\n"
                              "micro_batch_size: 3\ngradient_accumulation_steps: 2\n");
  EXPECT_EQ(reads.blocking, Reads{});
  EXPECT_EQ(reads.lagged, kLagged);
}

// LoRA on an INT8 base with 8-bit AdamW, two layers streamed through the copy engine, activation
// offloading: no read either (the 8-bit optimizer takes its decision on the device too).
TEST_F(HostReads, AnInt8OffloadedStepWith8bitAdamWReadsNothing) {
  const auto base = test::model_fixture("llama");
  const auto reads = per_step("base_model: " + (base / "base").string() +
                              "\nadapter: lora\nload_in_8bit: true\nlora_r: 4\nlora_target_linear: true\n"
                              "optimizer: adamw_bnb_8bit\noffload_layers: 2\ngradient_checkpointing: true\n"
                              "activation_offloading: true\nmicro_batch_size: 3\n");
  EXPECT_EQ(reads.blocking, Reads{});
  EXPECT_EQ(reads.lagged, kLagged);
}

// DPO on an NF4 base (the reference and the model in each micro-batch): no read either; the pairs'
// token counts and the positions whose logits TRL averages are host data, copied to the device
// without a synchronization.
TEST_F(HostReads, ADpoStepReadsNothing) {
  const auto base = test::model_fixture("llama");
  const auto reads = per_step("base_model: " + (base / "base").string() +
                              "\nadapter: qlora\nload_in_4bit: true\nlora_r: 4\nlora_target_linear: true\n"
                              "rl: dpo\nmicro_batch_size: 2\ngradient_accumulation_steps: 2\n");
  EXPECT_EQ(reads.blocking, Reads{});
  EXPECT_EQ(reads.lagged, kLagged);
}

// A MoE model (Mixtral's fixture: 3 sparse layers) with the load-balancing loss: every sparse
// layer reads its rows per expert in the forward and again in the checkpointed recompute.
TEST_F(HostReads, AMoeStepReadsRowsPerExpertPerLayerPass) {
  const auto base = test::moe_fixture("mixtral");
  const auto reads = per_step("base_model: " + (base / "base").string() +
                              "\nadapter: lora\nlora_r: 4\nlora_target_modules: [q_proj]\n"
                              "lora_target_parameters: [mlp.experts.gate_up_proj]\n"
                              "model_config: {output_router_logits: true}\n"
                              "gradient_checkpointing: true\nmicro_batch_size: 3\ngradient_accumulation_steps: 2\n");
  const Reads expected = {{"experts: rows per expert", 2 * 3 * 2}};
  EXPECT_EQ(reads.blocking, expected);
  EXPECT_EQ(reads.lagged, kLagged);
}

}  // namespace
}  // namespace qtrain::engine::train
