// How a training run uses its device's memory, decided before the model is loaded: the memory
// plan (from config.json alone, engine/train/run_plan.h), the limit put on the CUDA allocator
// (gpu_memory_limit), the residency plan (where each layer's weights and activations live), and,
// once the model is loaded, the residency that streams them. A plan that does not fit stops the run here, with the
// table, instead of an out-of-memory error deep in a step; an out-of-memory error that happens anyway is reported with
// the same table (out_of_memory_report).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "engine/config/run_config.h"
#include "engine/dist/sharded_base.h"
#include "engine/model/causal_lm.h"
#include "engine/schedule/residency_plan.h"
#include "engine/schedule/streamed_weights.h"
#include "offload/planner.h"

namespace qtrain::engine::train {

struct DevicePlan {
  at::Device device = at::kCPU;
  // On CUDA, always; on the CPU only when layers are offloaded (through the simulated copy
  // engine: it exercises the machinery and saves no memory).
  std::optional<offload::MemoryPlan> memory;
  // The offloaded layers come from `memory` (the planner chooses them), the rest from the config.
  schedule::ResidencyPlan residency;
  // When layers or activations are offloaded: the copy engine (CUDA, or simulated on the CPU) and,
  // on CUDA, the bandwidth it measured.
  std::shared_ptr<offload::CopyEngine> copy_engine;
  double h2d_bytes_per_s = 0;
};

// Plans the run on `device` for each of `world_size` ranks, prints the plan to `log`, and on CUDA
// limits the allocator to the budget. Errors, with the table and its advice, when the plan does
// not fit.
DevicePlan plan_device(const config::RunConfig& config,
                       const at::Device& device,
                       int64_t world_size = 1,
                       std::FILE* log = stdout);

// The residency the plan implies for the loaded model: its layers streamed from the sharded base
// (made before loading, see ShardedBase::prepare_load) or from host memory; null when every
// layer is resident. Prints what it streams to `log`.
std::shared_ptr<schedule::StreamedWeights> make_residency(const DevicePlan& plan,
                                                          model::CausalLM& model,
                                                          std::shared_ptr<dist::ShardedBase> sharded,
                                                          std::FILE* log = stdout);

// Empty when `available_bytes` of host RAM hold what `plan` pins there (offloaded layers and
// offloaded activations) with a quarter to spare for everything else the process and the system
// need; otherwise why not and what to change.
std::string pinned_memory_problem(const offload::MemoryPlan& plan, int64_t available_bytes);

// MemAvailable of /proc/meminfo in bytes; -1 where it cannot be read.
int64_t host_memory_available_bytes();

// The message for an out-of-memory error in step `step`: what the allocator said, the plan, and
// what to change.
std::string out_of_memory_report(const DevicePlan& plan,
                                 const config::RunConfig& config,
                                 int64_t step,
                                 const std::string& allocator_message);

}  // namespace qtrain::engine::train
