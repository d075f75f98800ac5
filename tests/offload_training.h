// Shared by the CPU and GPU offload tests: the test llama (tests/llama_fixture.h) with LoRA on
// every linear (non-zero B, dropout on, so gradients are non-trivial and the recompute must replay
// the RNG), and two training steps of it under a given residency.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/schedule/residency_plan.h"
#include "tests/llama_fixture.h"
#include "tests/reference.h"

namespace qtrain::test {

// `host_layers` go into the load options, then `configure` sees them (a sharded base sets its
// hooks there); the model is read from `folder` (default: the test llama). The LoRA B init
// draws from a generator of its own, so ranks on threads of one test get the same model.
inline engine::model::CausalLM load_llama_with_lora(
    engine::model::QuantSpec::Kind kind,
    at::ScalarType dtype = at::kFloat,
    const at::Device& device = at::kCPU,
    double dropout = 0.1,
    const std::function<void(engine::model::LoadOptions&)>& configure = {},
    std::vector<int64_t> host_layers = {},
    const std::filesystem::path& folder = {}) {
  engine::model::QuantSpec q;
  q.kind = kind;
  q.double_quant = true;
  engine::model::LoadOptions options;
  options.quant = q;
  options.dtype = dtype;
  options.device = device;
  options.host_layers = std::move(host_layers);
  if (configure) configure(options);
  auto lm = engine::model::CausalLM::load(engine::io::HfFolder::open(folder.empty() ? llama_fixture().base : folder),
                                          options);
  engine::lora::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.dropout = dropout;
  c.target_all_linear = true;
  engine::model::attach_new_lora(lm, c, 11);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  at::NoGradGuard no_grad;
  for (auto& [name, a] : engine::model::lora_adapters(lm)) {
    a.b.copy_(at::empty(a.b.sizes(), at::kFloat).normal_(0, 0.05, gen));
  }
  return lm;
}

// The residency plan that offloads `host_layers` of `lm` (to host memory, or with `shard_base` a
// sharded base's slices of them).
inline engine::schedule::ResidencyPlan offload_plan(const engine::model::CausalLM& lm,
                                                    std::vector<int64_t> host_layers,
                                                    int64_t prefetch_depth = 1,
                                                    bool shard_base = false) {
  return engine::schedule::ResidencyPlan(static_cast<int64_t>(lm.layers().size()),
                                         {std::move(host_layers), shard_base, prefetch_depth, false});
}

struct StepsResult {
  std::vector<at::Tensor> losses;         // per step, on the CPU
  std::vector<at::Tensor> grads;          // every LoRA tensor's gradient after the steps, on the CPU
  int64_t checkpointed = 0;               // layers the plan checkpoints
  std::vector<int64_t> activation_bytes;  // per step: what its forward left for backward (StepStats)
};

// Two training steps (forward + backward each, gradients accumulating) under `residency`
// (null: every layer resident), the checkpointed inputs in `activations` (null: on the device),
// the MLPs through `tiled` (null: whole).
inline StepsResult two_steps(engine::model::CausalLM& lm,
                             std::shared_ptr<engine::schedule::WeightResidency> residency,
                             engine::schedule::CheckpointPolicy policy,
                             std::shared_ptr<engine::schedule::OffloadedActivations> activations = nullptr,
                             std::shared_ptr<engine::schedule::TiledMlp> tiled = nullptr) {
  engine::schedule::LayerScheduler scheduler(lm, std::move(residency));
  scheduler.offload_activations(std::move(activations));
  scheduler.tile_mlp(std::move(tiled));
  const auto plan = scheduler.prepare_training(policy);
  const auto& batch = llama_fixture();
  StepsResult r;
  r.checkpointed = plan.num_checkpointed();
  r.activation_bytes.clear();
  for (auto& p : lm.trainable_parameters()) p.mutable_grad() = at::Tensor();
  at::manual_seed(123);
  for (int step = 0; step < 2; ++step) {
    const auto [sum, tokens] = scheduler.train_forward(plan, batch.ids, batch.labels);
    r.activation_bytes.push_back(scheduler.stats().activation_bytes);
    (sum / tokens).backward();
    r.losses.push_back(sum.detach().cpu());
  }
  for (const auto& p : lm.trainable_parameters()) r.grads.push_back(p.grad().cpu());
  return r;
}

// Every loss and every LoRA gradient of `got` bitwise equal to `want`'s; `what` names the run.
inline void expect_same_steps(const StepsResult& got, const StepsResult& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_TRUE(bitwise_equal(got.losses[s], want.losses[s])) << what << ", step " << s;
  }
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(got.grads[i], want.grads[i])) << what << ", gradient " << i;
  }
}

}  // namespace qtrain::test
