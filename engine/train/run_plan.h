// The GPU memory plan of a run, from its config and the base model's config.json alone: no
// weights are read and no GPU is needed. `qtrain plan` prints it; the trainer uses it to choose
// offload_layers: auto and to fail early, with the table, when a run cannot fit.
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/config/run_config.h"
#include "engine/model/model_config.h"
#include "engine/schedule/memory_estimate.h"
#include "offload/planner.h"

namespace qtrain::engine::train {

// base_model/config.json, read and checked; the weight files are not opened.
model::ModelConfig read_model_config(const std::filesystem::path& base_model);

// What the run's settings mean for its memory on a CUDA device (bf16: auto is bf16 there), for a
// base of `model`'s architecture.
schedule::MemoryShape memory_shape(const config::RunConfig& config, const model::ModelConfig& model);

// The plan for `budget_bytes` of device memory on each of `world_size` ranks: offload_layers as
// the config says (auto: as few as fit), offload_prefetch_depth, shard_base, and host-to-device
// copies at `h2d_bytes_per_s`. When it does not fit, its advice ends with the config changes that
// would make it fit, each checked by planning again. This is the one place that decides which
// layers are offloaded and whether the base is sharded; the trainer carries its result.
offload::MemoryPlan plan_run(const config::RunConfig& config,
                             const model::ModelConfig& model,
                             int64_t budget_bytes,
                             double h2d_bytes_per_s = offload::kDefaultH2dBytesPerSecond,
                             int64_t world_size = 1);

// The longest sequence_len (a multiple of `granularity`) whose step fits `budget_bytes` with the
// config otherwise as given (offload_layers auto or fixed, checkpointing, activation offloading);
// 0 when not even `granularity` tokens fit. Searched up to 2^24 tokens per micro-batch row.
int64_t longest_sequence_len(const config::RunConfig& config,
                             const model::ModelConfig& model,
                             int64_t budget_bytes,
                             double h2d_bytes_per_s = offload::kDefaultH2dBytesPerSecond,
                             int64_t world_size = 1,
                             int64_t granularity = 256);

}  // namespace qtrain::engine::train
