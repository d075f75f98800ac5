// Whether activation offloading hides its copies, by the simulated copy engine's accounting on the
// CPU: the step time with the checkpointed inputs copied out and back against max(compute,
// transfer), where compute is the same step with the inputs kept and transfer is what the copies
// take at a given bandwidth (each simulated copy waits bytes / bandwidth before moving its bytes,
// on the engine's worker thread, as a DMA engine would work beside the compute).
//
// Note [The memory bound on activation offloading's overlap]
// max(compute, transfer) is reachable only where the copies out fit in the forward. The device
// holds at most prefetch_depth + 2 inputs (what the memory plan counts): at the end of the
// forward all inputs but the last depth + 1 (which stay) and one still leaving must be in host
// memory, so the forward takes at least max(forward, (moved - 1) x copy); the copies back start
// with the backward, so it takes at least max(backward, moved x copy). Their sum is the bound a
// schedule within the plan's memory can reach; where the copies out take longer than the
// forward it exceeds max(compute, transfer).
//
//   qtrain_bench_activation_offload --model DIR [--seq 1024] [--bandwidth 25] [--depth 1] [--steps 7]
//
// LoRA r 16 on every linear layer, every layer checkpointed, one micro-batch of random tokens; a
// step is one forward and backward. Prints one JSON line with the median step times, the ratio
// step / max(compute, transfer) (the target is at most 1.05) and the ratio to the memory bound.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "offload/simulated_copy_engine.h"

namespace {

using namespace qtrain::engine;

struct StepTimes {
  double step = 0;     // median seconds of a whole step
  double forward = 0;  // median seconds of its forward
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median wall-clock times of `steps` training steps of each run after one warm-up, the steps
// of the two runs taking turns so that a drift of the machine's speed falls on both alike.
std::pair<StepTimes, StepTimes> median_step_seconds(model::CausalLM& lm,
                                                    const std::shared_ptr<schedule::OffloadedActivations>& activations,
                                                    const at::Tensor& ids,
                                                    int64_t steps) {
  schedule::LayerScheduler kept(lm), offloaded(lm);
  offloaded.offload_activations(activations);
  const auto kept_plan = kept.prepare_training(schedule::CheckpointPolicy::every_layer);
  const auto offloaded_plan = offloaded.prepare_training(schedule::CheckpointPolicy::every_layer);
  const auto params = lm.trainable_parameters();
  std::vector<double> times[2], forwards[2];
  for (int64_t s = 0; s < steps + 1; ++s) {
    for (int run = 0; run < 2; ++run) {
      auto& scheduler = run == 0 ? kept : offloaded;
      const auto t0 = std::chrono::steady_clock::now();
      const auto r = scheduler.train_forward(run == 0 ? kept_plan : offloaded_plan, ids, ids);
      const auto t1 = std::chrono::steady_clock::now();
      (r.loss_sum / r.tokens).backward();
      for (const auto& p : params) p.mutable_grad() = at::Tensor();
      if (s == 0) continue;
      times[run].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      forwards[run].push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  return {{median(times[0]), median(forwards[0])}, {median(times[1]), median(forwards[1])}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Activation offloading's overlap by the simulated copy engine's accounting (CPU)"};
  std::string model_dir;
  int64_t seq = 1024, depth = 1, steps = 7;
  double bandwidth_gb_s = 25;
  app.add_option("--model", model_dir, "Hugging Face model folder")->required();
  app.add_option("--seq", seq, "tokens of the micro-batch")->capture_default_str();
  app.add_option("--bandwidth", bandwidth_gb_s, "simulated copy bandwidth, GB/s")->capture_default_str();
  app.add_option("--depth", depth, "offload_prefetch_depth")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto lm = model::CausalLM::load(io::HfFolder::open(model_dir), model::LoadOptions{});
  lora::LoraConfig lc;
  lc.r = 16;
  lc.alpha = 32;
  lc.target_all_linear = true;
  model::attach_new_lora(lm, lc, 0);
  at::manual_seed(0);
  const auto ids = at::randint(0, lm.config().vocab_size, {1, seq}, at::kLong);

  const int64_t layers = lm.config().num_layers;
  const int64_t input_bytes = seq * lm.config().hidden_size * 4;  // float32 [1, seq, hidden]
  const double copy_seconds = static_cast<double>(input_bytes) / (bandwidth_gb_s * 1e9);
  // Out and back for every checkpointed layer but the last depth + 1, whose inputs stay.
  const int64_t moved = layers - std::min(layers, depth + 1);
  const double transfer = 2.0 * static_cast<double>(moved) * copy_seconds;

  auto engine = std::make_shared<qtrain::offload::SimulatedCopyEngine>(qtrain::offload::SimulatedCopyOptions{
      std::chrono::microseconds(static_cast<int64_t>(copy_seconds * 1e6)), false});
  const auto [compute, offloaded] =
      median_step_seconds(lm, std::make_shared<schedule::OffloadedActivations>(engine, depth), ids, steps);
  // See Note [The memory bound on activation offloading's overlap].
  const double bound = std::max(compute.forward, static_cast<double>(std::max<int64_t>(moved - 1, 0)) * copy_seconds) +
                       std::max(compute.step - compute.forward, static_cast<double>(moved) * copy_seconds);
  const nlohmann::json out = {{"seq", seq},
                              {"layers", layers},
                              {"inputs_moved", moved},
                              {"input_bytes", input_bytes},
                              {"bandwidth_gb_s", bandwidth_gb_s},
                              {"depth", depth},
                              {"compute_seconds", compute.step},
                              {"compute_forward_seconds", compute.forward},
                              {"transfer_seconds", transfer},
                              {"offloaded_step_seconds", offloaded.step},
                              {"offloaded_forward_seconds", offloaded.forward},
                              {"ratio", offloaded.step / std::max(compute.step, transfer)},
                              {"memory_bound_seconds", bound},
                              {"ratio_to_memory_bound", offloaded.step / bound}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
