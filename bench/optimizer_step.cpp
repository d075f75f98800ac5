// Step time and state bytes of qtrain's optimizers on LoRA-shaped parameters on the CPU.
// bench/optimizer_step.py runs it next to torch's AdamW and bitsandbytes' AdamW8bit on the same
// shapes and threads and prints the comparison.
//
//   qtrain_bench_optimizer --tensors 64 --rows 16 --cols 4096 --steps 20 --threads 2
//
// Prints one JSON line per optimizer: its name, the best step time over `steps` steps (each with
// fresh gradients, outside the timing) and the bytes of its state.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/train/optimizer.h"

int main(int argc, char** argv) {
  CLI::App app{"Step time and state bytes of qtrain's optimizers (CPU)"};
  int64_t tensors = 64, rows = 16, cols = 4096, steps = 20, threads = 2;
  app.add_option("--tensors", tensors, "number of parameter tensors")->capture_default_str();
  app.add_option("--rows", rows, "rows of each tensor (the LoRA rank)")->capture_default_str();
  app.add_option("--cols", cols, "columns of each tensor")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--threads", threads, "intra-op threads")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(static_cast<int>(threads));

  using namespace qtrain::engine::train;
  for (const char* name : {"adamw_torch", "adamw_bnb_8bit"}) {
    at::manual_seed(0);
    std::vector<at::Tensor> params;
    for (int64_t i = 0; i < tensors; ++i) params.push_back(at::randn({rows, cols}).requires_grad_(true));
    AdamWOptions options;
    options.weight_decay = 0.01;
    const auto optimizer = make_optimizer(name, params, options);
    double best = 1e30;
    for (int64_t s = 0; s < steps + 1; ++s) {
      for (auto& p : params) p.mutable_grad() = at::randn({rows, cols}) * 0.01;
      const auto t0 = std::chrono::steady_clock::now();
      optimizer->step(1e-4);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) best = std::min(best, dt);  // the first step is a warm-up
    }
    const nlohmann::json j = {{"optimizer", name},
                              {"step_seconds", best},
                              {"state_bytes", optimizer->state_nbytes()},
                              {"parameters", tensors * rows * cols}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}
