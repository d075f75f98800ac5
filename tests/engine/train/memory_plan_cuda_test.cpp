// The memory plan against a CUDA training run: every logged step's peak of allocated bytes
// (peak_memory_bytes) is at most what the plan counted for it (planned_peak_bytes, the rows the
// allocator hands out), for a dense model and MoE models, with and without checkpointing, with
// offloaded layers, and with offloaded activations and tiled MLPs. The ratio of each is printed,
// and the peak's three parts (resident, activations, transient) beside the plan's, so that the
// GPU check's log records how close the plan came and which part a miss is in. The trainer starts each logged
// window's peak afresh (after loading, the copy-bandwidth probe and the previous case), so nothing
// here touches the allocator: before train() initialises CUDA, the allocator's statistics do not
// exist yet. Skips itself where no CUDA device is present.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"
#include "engine/io/remove_tree.h"
#include "engine/model/init_model.h"
#include "engine/train/trainer.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;
  model::Architecture arch;
  std::string preset;
  std::map<std::string, std::string> keys;  // over the common ones below
};

TEST(MemoryPlanCuda, EveryStepsPeakIsWithinWhatThePlanCounted) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto dir = test::fresh_test_dir(true);
  const int64_t seq = 512;
  const std::string experts = "[experts.gate_up_proj, experts.down_proj]";
  const std::vector<Case> cases = {
      {"llama", model::Architecture::llama, "small", {{"gradient_checkpointing", "false"}}},
      {"llama-checkpointed-offload",
       model::Architecture::llama,
       "small",
       {{"gradient_checkpointing", "true"}, {"offload_layers", "4"}}},
      {"llama-activations-offloaded-tiled",
       model::Architecture::llama,
       "small",
       {{"gradient_checkpointing", "true"},
        {"activation_offloading", "true"},
        {"tiled_mlp", "true"},
        {"tiled_mlp_num_shards", "4"}}},
      {"llama-int8",
       model::Architecture::llama,
       "small",
       {{"load_in_4bit", "false"}, {"load_in_8bit", "true"}, {"adapter", "lora"}}},
      {"qwen3-moe",
       model::Architecture::qwen3_moe,
       "tiny-moe",
       {{"gradient_checkpointing", "false"}, {"lora_target_parameters", experts}}},
      {"gemma4-moe-packed",
       model::Architecture::gemma4,
       "tiny-moe",
       {{"sample_packing", "true"}, {"lora_target_parameters", experts}}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const auto config = model::preset_config(k.arch, k.preset);
    // One model and dataset per architecture and preset, shared by the cases that train it.
    const std::string model_name = model::architecture_name(k.arch) + "-" + k.preset;
    const auto model_dir = dir / ("model-" + model_name);
    const auto data_file = dir / ("data-" + model_name + ".jsonl");
    if (!fs::exists(model_dir / "config.json")) {
      model::write_random_model(model_dir, config, 5, at::kBFloat16);
      std::ofstream data(data_file);
      const auto ids = at::randint(config.vocab_size, {8, seq}, at::kLong);
      for (int64_t i = 0; i < ids.size(0); ++i) {
        const auto row = ids[i];
        data << nlohmann::json{{"input_ids",
                                std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + seq)}}
                    .dump()
             << "\n";
      }
    }
    std::map<std::string, std::string> keys = {
        {"base_model", model_dir.string()},
        {"load_in_4bit", "true"},
        {"bnb_4bit_use_double_quant", "true"},
        {"adapter", "qlora"},
        {"lora_r", "16"},
        {"lora_alpha", "32"},
        {"lora_target_linear", "true"},
        {"datasets", "[{path: " + data_file.string() + ", type: pretokenized}]"},
        {"sequence_len", std::to_string(seq)},
        {"micro_batch_size", "2"},
        {"max_steps", "3"},
        {"logging_steps", "1"},
        {"learning_rate", "0.0001"},
        {"gradient_checkpointing", "true"},
        {"bf16", "auto"},
        {"device", "cuda"},
        {"seed", "1"},
        {"output_dir", (dir / ("out-" + k.name)).string()},
    };
    for (const auto& [key, value] : k.keys) keys[key] = value;
    const auto yaml = dir / (k.name + ".yaml");
    {
      std::ofstream out(yaml);
      for (const auto& [key, value] : keys) out << key << ": " << value << "\n";
    }
    const auto result = train(config::load_run_config(yaml, {}));
    ASSERT_EQ(result.steps, 3);
    std::ifstream metrics(dir / ("out-" + k.name) / "metrics.jsonl");
    std::string line;
    int rows = 0;
    while (std::getline(metrics, line)) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;
      ++rows;
      ASSERT_TRUE(j.contains("planned_peak_bytes")) << line;
      const auto peak = j.at("peak_memory_bytes").get<int64_t>();
      const auto planned = j.at("planned_peak_bytes").get<int64_t>();
      std::printf("[memory plan] %s step %d: peak %.1f MiB, planned %.1f MiB (%.2fx)\n",
                  k.name.c_str(),
                  rows,
                  static_cast<double>(peak) / (1 << 20),
                  static_cast<double>(planned) / (1 << 20),
                  static_cast<double>(planned) / static_cast<double>(peak));
      // The peak's parts against the plan's, so that a miss names the part the plan got wrong.
      for (const char* part : {"resident", "activation", "transient"}) {
        const auto got = j.at(std::string(part) + "_bytes").get<int64_t>();
        const auto want = j.at(std::string("planned_") + part + "_bytes").get<int64_t>();
        std::printf("[memory plan]   %s: %.2f MiB, planned %.2f MiB (%+.2f MiB)\n",
                    part,
                    static_cast<double>(got) / (1 << 20),
                    static_cast<double>(want) / (1 << 20),
                    static_cast<double>(want - got) / (1 << 20));
      }
      EXPECT_LE(peak, planned) << line;
    }
    EXPECT_EQ(rows, 3);
  }
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::train
