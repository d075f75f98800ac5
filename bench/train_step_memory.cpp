// Peak memory of one QLoRA training step (forward + backward) on the CPU, with or without
// gradient checkpointing. bench/train_step_memory.py runs it next to transformers + peft +
// bitsandbytes on the same model and prints the comparison.
//
//   qtrain_bench_train_step --model DIR --seq 1024 --checkpoint every_layer
//
// Prints one JSON line: the step's peak resident memory above the memory held before it
// (Linux: peak reset through /proc/self/clear_refs, read from VmHWM), and the scheduler's stats.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/lora_bench_model.h"
#include "bench/process_memory.h"
#include "engine/schedule/layer_scheduler.h"

int main(int argc, char** argv) {
  CLI::App app{"Peak memory of one QLoRA training step on the CPU"};
  std::string model_dir, policy = "every_layer", quant = "nf4";
  int64_t seq = 1024, batch = 1, rank = 16;
  app.add_option("--model", model_dir, "Hugging Face model folder")->required();
  app.add_option("--seq", seq, "sequence length")->capture_default_str();
  app.add_option("--batch", batch, "micro batch size")->capture_default_str();
  app.add_option("--rank", rank, "LoRA rank (all linear layers)")->capture_default_str();
  app.add_option("--checkpoint", policy, "none or every_layer")->capture_default_str();
  app.add_option("--quant", quant, "nf4 (double quant) or none")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  using namespace qtrain::engine;
  auto lm = qtrain::bench::lora_bench_model(model_dir, rank, quant == "nf4");
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(schedule::checkpoint_policy_from_name(policy));
  at::manual_seed(0);
  const auto ids = at::randint(0, lm.config().vocab_size, {batch, seq}, at::kLong);

  const int64_t before_kib = qtrain::bench::status_kib("VmRSS");
  qtrain::bench::reset_peak_rss();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = scheduler.train_forward(plan, ids, ids);
  (r.loss_sum / r.tokens).backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t peak_kib = qtrain::bench::status_kib("VmHWM");
  const auto& stats = scheduler.stats();
  nlohmann::json out = {{"engine", "qtrain"},
                        {"checkpoint", policy},
                        {"seq", seq},
                        {"batch", batch},
                        {"rss_before_step_bytes", before_kib * 1024},
                        {"step_peak_above_before_bytes", (peak_kib - before_kib) * 1024},
                        {"activation_bytes_after_forward", stats.activation_bytes},
                        {"layers_recomputed", stats.layers_recomputed},
                        {"loss", (r.loss_sum / r.tokens).item<double>()},
                        {"step_seconds", seconds}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
