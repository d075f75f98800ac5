// Operators dispatched by one QLoRA training step on the CPU (forward, backward, gradient
// clipping, AdamW), counted through ATen's RecordFunction callbacks: every "aten::" event,
// nested ones included, as torch.profiler records them for the Python stack. bench/op_count.py
// runs it next to transformers + peft + bitsandbytes on the same model.
//
//   qtrain_bench_op_count --model DIR --seq 256 --checkpoint every_layer
//
// Prints one JSON line: the count of the second step (the first warms caches) and the most
// frequent operators.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/lora_bench_model.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/train/adamw.h"
#include "engine/train/clip_grad.h"

namespace {

std::mutex counts_mutex;
std::map<std::string, int64_t> counts;
std::atomic<bool> counting{false};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!counting.load()) return nullptr;
  const std::string name = fn.name();
  if (name.rfind("aten::", 0) == 0) {
    std::lock_guard<std::mutex> lock(counts_mutex);
    ++counts[name];
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Operators dispatched by one QLoRA training step on the CPU"};
  std::string model_dir, policy = "every_layer";
  int64_t seq = 256, rank = 16, shown = 12;
  app.add_option("--model", model_dir, "Hugging Face model folder")->required();
  app.add_option("--seq", seq, "sequence length")->capture_default_str();
  app.add_option("--rank", rank, "LoRA rank (all linear layers)")->capture_default_str();
  app.add_option("--checkpoint", policy, "none or every_layer")->capture_default_str();
  app.add_option("--top", shown, "how many of the most frequent operators to list")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  using namespace qtrain::engine;
  auto lm = qtrain::bench::lora_bench_model(model_dir, rank, /*nf4=*/true);
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(schedule::checkpoint_policy_from_name(policy));
  const auto params = lm.trainable_parameters();
  train::AdamW optimizer(params, train::AdamWOptions{});
  at::manual_seed(0);
  const auto ids = at::randint(0, lm.config().vocab_size, {1, seq}, at::kLong);
  at::addGlobalCallback(
      at::RecordFunctionCallback(on_start).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  double loss = 0;
  for (int step = 0; step < 2; ++step) {
    counting = step == 1;
    auto r = scheduler.train_forward(plan, ids, ids);
    const auto mean = r.loss_sum / r.tokens;
    mean.backward();
    train::clip_grad_norm(params, 1.0);
    optimizer.step(1e-4);
    for (const auto& p : params) p.mutable_grad().reset();
    counting = false;
    loss = mean.item<double>();
  }
  int64_t total = 0;
  std::vector<std::pair<int64_t, std::string>> top;
  for (const auto& [name, n] : counts) {
    total += n;
    top.emplace_back(n, name);
  }
  std::sort(top.rbegin(), top.rend());
  nlohmann::json most = nlohmann::json::object();
  for (size_t i = 0; i < top.size() && i < static_cast<size_t>(shown); ++i) most[top[i].second] = top[i].first;
  std::printf("%s\n",
              nlohmann::json{{"engine", "qtrain"},
                             {"checkpoint", policy},
                             {"seq", seq},
                             {"aten_ops", total},
                             {"loss", loss},
                             {"most", most}}
                  .dump()
                  .c_str());
  return 0;
}
