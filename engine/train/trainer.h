// The training loop behind `qtrain train`: LoRA on a frozen (quantized) base, AdamW, an LR
// schedule with warmup, gradient accumulation with token-weighted loss, clipping, evaluation,
// checkpoints with exact resume, metrics (console, metrics.jsonl, TensorBoard), and a clean stop
// on SIGINT/SIGTERM that saves a checkpoint first. Started by torchrun or `qtrain launch`, it is one
// rank of a data-parallel run (See Note [Data-parallel steps], engine/train/data_parallel.h).
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/config/run_config.h"

namespace qtrain::engine::train {

struct TrainResult {
  int64_t steps = 0;          // global step reached
  int64_t skipped_steps = 0;  // non-finite loss or gradient
  double last_loss = 0.0;     // mean loss of the last logged window
  bool interrupted = false;   // stopped by a signal (a checkpoint was saved)
  bool lead = true;           // rank 0 of a multi-process run (or the only process): the one that reports
  std::filesystem::path output_dir;
};

TrainResult train(const config::RunConfig& config);

}  // namespace qtrain::engine::train
