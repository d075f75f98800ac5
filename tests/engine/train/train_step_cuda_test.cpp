// A CUDA training step without host synchronizations (Note [Sync check]), and CUDA's fused AdamW
// against the CPU's multi-tensor kernel (Note [AdamW kernels]). Skips itself where no CUDA device
// is present.
#include <cstdlib>
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
#include "engine/train/adamw.h"
#include "engine/train/clip_grad.h"
#include "engine/train/trainer.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

// Four steps logged at the fourth, under QTRAIN_SYNC_CHECK=error: steps 2 and 3 run under c10's
// sync-debug mode, where any host synchronization throws torch's error naming the operation.
// Dense QLoRA with AdamW (CUDA's fused kernel); LoRA on an INT8 base with 8-bit AdamW, two
// streamed layers and offloaded activations; DPO on the NF4 base.
TEST(TrainStepCuda, StepsThatDoNotLogDoNotSynchronize) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto dir = test::fresh_test_dir(true);
  const int64_t seq = 256;
  const auto config = model::preset_config(model::Architecture::llama, "small");
  const auto model_dir = dir / "model";
  model::write_random_model(model_dir, config, 5, at::kBFloat16);
  {
    const auto ids = [&](int64_t n) {
      const auto t = at::randint(config.vocab_size, {n}, at::kLong);
      return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
    };
    std::ofstream data(dir / "data.jsonl");
    std::ofstream pairs(dir / "pairs.jsonl");
    for (int64_t i = 0; i < 8; ++i) {
      data << nlohmann::json{{"input_ids", ids(seq)}}.dump() << "\n";
      pairs
          << nlohmann::json{{"prompt_ids", ids(60 + i)}, {"chosen_ids", ids(40)}, {"rejected_ids", ids(50 - i)}}.dump()
          << "\n";
    }
  }
  const std::map<std::string, std::map<std::string, std::string>> cases = {
      {"qlora", {{"load_in_4bit", "true"}, {"adapter", "qlora"}}},
      {"int8-offloaded",
       {{"load_in_8bit", "true"},
        {"adapter", "lora"},
        {"optimizer", "adamw_bnb_8bit"},
        {"offload_layers", "2"},
        {"activation_offloading", "true"}}},
      {"dpo", {{"load_in_4bit", "true"}, {"adapter", "qlora"}, {"rl", "dpo"}}},
  };
  // Set for this test only, whatever it ends with.
  struct SyncCheckOn {
    SyncCheckOn() { ::setenv("QTRAIN_SYNC_CHECK", "error", 1); }
    ~SyncCheckOn() { ::unsetenv("QTRAIN_SYNC_CHECK"); }
  } sync_check_on;
  for (const auto& [name, extra] : cases) {
    SCOPED_TRACE(name);
    std::map<std::string, std::string> keys = {
        {"base_model", model_dir.string()},
        {"lora_r", "8"},
        {"lora_target_linear", "true"},
        {"datasets",
         extra.contains("rl") ? "[{path: " + (dir / "pairs.jsonl").string() + "}]"
                              : "[{path: " + (dir / "data.jsonl").string() + ", type: pretokenized}]"},
        {"sequence_len", std::to_string(seq)},
        {"micro_batch_size", "2"},
        {"gradient_accumulation_steps", "2"},
        {"max_steps", "4"},
        {"logging_steps", "4"},
        {"learning_rate", "0.0001"},
        {"gradient_checkpointing", "true"},
        {"bf16", "auto"},
        {"device", "cuda"},
        {"seed", "1"},
        {"output_dir", (dir / ("out-" + name)).string()},
    };
    for (const auto& [key, value] : extra) keys[key] = value;
    const auto yaml = dir / (name + ".yaml");
    {
      std::ofstream out(yaml);
      for (const auto& [key, value] : keys) out << key << ": " << value << "\n";
    }
    try {
      EXPECT_EQ(train(config::load_run_config(yaml, {})).steps, 4);
    } catch (const c10::Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  io::remove_tree(dir);
}

// CUDA's fused AdamW over 10 steps, the fourth with a NaN gradient decided on the device, against
// the CPU's multi-tensor kernel fed the same gradients: the skipped step leaves the parameters
// bit for bit, and the rest stay within float32 rounding (2e-6 of the largest change, as on the
// CPU in AdamW.FusedKernelFollowsTheMultiTensorKernel).
TEST(TrainStepCuda, FusedAdamWTracksTheCpuKernelAndSkipsOnTheDevice) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  AdamWOptions options;
  options.weight_decay = 0.05;
  at::manual_seed(4);
  std::vector<at::Tensor> cpu_params, cuda_params, start;
  for (const auto& shape : {std::vector<int64_t>{64, 48}, {16}, {300, 7}}) {
    const auto p = at::randn(shape);
    start.push_back(p);
    cpu_params.push_back(p.clone().requires_grad_(true));
    cuda_params.push_back(p.cuda().requires_grad_(true));
  }
  AdamW cpu(cpu_params, options, AdamWKernel::multi_tensor);
  AdamW cuda(cuda_params, options);
  for (int64_t step = 0; step < 10; ++step) {
    for (size_t i = 0; i < start.size(); ++i) {
      auto grad = at::randn(start[i].sizes());
      if (step == 3 && i == 2) grad[5][1] = NAN;
      cpu_params[i].mutable_grad() = grad;
      cuda_params[i].mutable_grad() = grad.cuda();
    }
    std::vector<at::Tensor> before;
    for (const auto& p : cuda_params) before.push_back(p.detach().clone());
    for (const auto& [name, t] : cuda.state_tensors()) {
      if (name != "step") before.push_back(t.clone());  // the counter is taken back below
    }
    const auto apply = grads_finite(cuda_params);
    cuda.step(1e-2, apply);
    cuda.zero_grad();
    if (step == 3) {
      // Every parameter (the one with the NaN gradient too) and every moment as it was.
      std::vector<at::Tensor> after;
      for (const auto& p : cuda_params) after.push_back(p.detach());
      for (const auto& [name, t] : cuda.state_tensors()) {
        if (name != "step") after.push_back(t);
      }
      ASSERT_EQ(after.size(), before.size());
      for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(after[i].cpu(), before[i].cpu())) << i;
      cuda.step_skipped();
      cpu.zero_grad();
      continue;
    }
    cpu.step(1e-2);
    cpu.zero_grad();
  }
  for (size_t i = 0; i < start.size(); ++i) {
    const auto change = (cpu_params[i] - start[i]).abs().max().item<double>();
    const auto diff = (cpu_params[i] - cuda_params[i].cpu()).abs().max().item<double>();
    EXPECT_LT(diff, 2e-6 * change) << "parameter " << i << ": changed by " << change;
  }
}

}  // namespace
}  // namespace qtrain::engine::train
