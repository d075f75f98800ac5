// Step time and peak memory of LoRA training steps of a mixture-of-experts model on the CPU.
// bench/moe_step.py runs it next to transformers + peft (+ bitsandbytes) on the same model and
// prints the comparison.
//
//   qtrain_bench_moe_step --model DIR --seq 512 --quant nf4 --quantize-experts true [--kernel grouped]
//
// LoRA on the attention (q, k, v, o) and on both expert parameters (PEFT's target_parameters).
// A step is one forward and backward of one micro-batch, gradients zeroed after it. Prints one
// JSON line: the median step time (wall clock and process CPU time) over --steps after --warmup
// steps, the resident memory before the first step and the peak over all steps above it (Linux:
// VmHWM after a reset through /proc/self/clear_refs), and the first step's loss.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/process_memory.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"

int main(int argc, char** argv) {
  CLI::App app{"Step time and peak memory of MoE LoRA training steps on the CPU"};
  std::string model_dir, policy = "every_layer", quant = "none", dtype = "fp32", kernel = "auto";
  int64_t seq = 512, batch = 1, rank = 16, steps = 5, warmup = 1, threads = 0;
  bool quantize_experts = true;
  app.add_option("--model", model_dir, "Hugging Face MoE model folder")->required();
  app.add_option("--seq", seq, "sequence length")->capture_default_str();
  app.add_option("--batch", batch, "micro batch size")->capture_default_str();
  app.add_option("--rank", rank, "LoRA rank")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--checkpoint", policy, "none or every_layer")->capture_default_str();
  app.add_option("--quant", quant, "nf4 (double quant) or none")->capture_default_str();
  app.add_option("--quantize-experts", quantize_experts, "quantize the experts as --quant says")->capture_default_str();
  app.add_option("--dtype", dtype, "compute dtype: fp32 or bf16")->capture_default_str();
  app.add_option("--threads", threads, "intra-op threads (0: libtorch's default)")->capture_default_str();
  app.add_option("--kernel", kernel, "expert kernel: auto, per-expert or grouped")
      ->check(CLI::IsMember({"auto", "per-expert", "grouped"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(static_cast<int>(threads));

  using namespace qtrain::engine;
  model::LoadOptions options;
  options.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  if (quant == "nf4") {
    options.quant.kind = model::QuantSpec::Kind::nf4;
    options.quant.double_quant = true;
  }
  options.quantize_moe_experts = quantize_experts;
  options.expert_kernel = kernel == "grouped"      ? model::ExpertKernel::grouped
                          : kernel == "per-expert" ? model::ExpertKernel::per_expert
                                                   : model::ExpertKernel::automatic;
  auto lm = model::CausalLM::load(io::HfFolder::open(model_dir), options);
  lora::LoraConfig lc;
  lc.r = rank;
  lc.alpha = 2.0 * rank;
  lc.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  lc.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  model::attach_new_lora(lm, lc, 0);
  const auto params = lm.trainable_parameters();
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_training(schedule::checkpoint_policy_from_name(policy));
  at::manual_seed(0);
  const auto ids = at::randint(0, lm.config().vocab_size, {batch, seq}, at::kLong);

  const int64_t before_kib = qtrain::bench::status_kib("VmRSS");
  qtrain::bench::reset_peak_rss();
  std::vector<double> times, cpu_times;
  double loss = 0;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    auto r = scheduler.train_forward(plan, ids, ids);
    const auto mean = r.loss_sum / r.tokens;
    mean.backward();
    for (const auto& p : params) p.mutable_grad() = at::Tensor();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    if (s == 0) loss = mean.item<double>();
    if (s >= warmup) {
      times.push_back(seconds);
      cpu_times.push_back(cpu_seconds);
    }
  }
  const int64_t peak_kib = qtrain::bench::status_kib("VmHWM");
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  nlohmann::json out = {{"engine", "qtrain"},
                        {"checkpoint", policy},
                        {"kernel", kernel},
                        {"seq", seq},
                        {"batch", batch},
                        {"rss_before_step_bytes", before_kib * 1024},
                        {"step_peak_above_before_bytes", (peak_kib - before_kib) * 1024},
                        {"peak_rss_bytes", peak_kib * 1024},
                        {"loss", loss},
                        {"step_seconds", times.at(times.size() / 2)},
                        {"step_seconds_all", times},
                        {"step_cpu_seconds", cpu_times.at(cpu_times.size() / 2)},
                        {"threads", at::get_num_threads()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
