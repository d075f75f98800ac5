// A training run's state on disk: output_dir/checkpoint-N/ holds the adapter (PEFT files, so
// peft loads a checkpoint as it is), the optimizer state, the RNG states, the data position and
// the step. A checkpoint is written into checkpoint-N.tmp and renamed into place, so a crash
// (even kill -9) during a write leaves every earlier checkpoint intact and loadable; names that
// are not checkpoint-<digits> with a trainer_state.json are never taken for checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/data/data_loader.h"
#include "engine/io/peft_adapter.h"
#include "engine/train/optimizer.h"

namespace qtrain::engine::train {

struct RunState {
  int64_t global_step = 0;    // optimizer steps done (skipped ones included)
  int64_t skipped_steps = 0;  // steps skipped for a non-finite loss or gradient
  data::DataLoader::Position data;
  // Ranks of the run that wrote it (engine/dist): a checkpoint resumes only on as many.
  int64_t world_size = 1;
  // Each rank's generator states, in rank order: the CPU generator's, and the CUDA one's (empty
  // on a CPU run).
  std::vector<at::Tensor> rng_cpu;
  std::vector<at::Tensor> rng_cuda;
};

struct CheckpointContents {
  RunState state;
  std::map<std::string, at::Tensor> optimizer;  // Optimizer::state_tensors()
  // The optimizer that wrote them (Optimizer::name(); "adamw_torch" for checkpoints written
  // before checkpoints recorded it, when qtrain had no other).
  std::string optimizer_name;
  std::map<std::string, lora::LoraAdapter> adapters;
  std::map<std::string, at::Tensor> saved_modules;  // the modules trained in full, by module path
  lora::LoraConfig lora;
};

// Writes output_dir/checkpoint-<global_step> atomically (see the file comment); returns it.
std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir,
                                      const RunState& state,
                                      const Optimizer& optimizer,
                                      const lora::LoraConfig& lora,
                                      const std::map<std::string, lora::LoraAdapter>& adapters,
                                      const std::map<std::string, at::Tensor>& saved_modules,
                                      const std::string& base_model,
                                      const std::string& run_config_yaml);

CheckpointContents load_checkpoint(const std::filesystem::path& dir);

// Puts the checkpoint's optimizer state into `optimizer`; refuses state written by another
// optimizer, naming both.
void load_optimizer_state(const CheckpointContents& checkpoint, const std::filesystem::path& dir, Optimizer& optimizer);

// The complete checkpoints in output_dir, oldest (lowest step) first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output_dir);
// Deletes the oldest checkpoints until `keep` remain; keep <= 0 keeps all.
void prune_checkpoints(const std::filesystem::path& output_dir, int64_t keep);

}  // namespace qtrain::engine::train
