// A training run set up for its first step: the phases of `qtrain train` before the loop (See Note
// [Training phases] in trainer.cpp). The memory plan, the model with its adapters and the modules
// it trains in full, the data, the step counts and learning-rate schedule, the optimizer, the
// layer scheduler, and the state resumed from a checkpoint.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/config/run_config.h"
#include "engine/data/data_loader.h"
#include "engine/data/preference_pairs.h"
#include "engine/dist/comm.h"
#include "engine/dist/sharded_base.h"
#include "engine/lora/lora_config.h"
#include "engine/model/causal_lm.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/train/data_parallel.h"
#include "engine/train/device_plan.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/optimizer.h"
#include "engine/train/reference_weights.h"
#include "engine/train/run_state.h"
#include "engine/train/run_vocabulary.h"

namespace qtrain::engine::train {

// How the run's steps divide the data (See Note [Data-parallel steps] and Note [Steps per epoch]).
struct StepCounts {
  int64_t step_batches = 1;  // micro-batches of one optimizer step over all ranks
  StepShare share;           // this rank's of them
  int64_t steps_per_epoch = 1;
  int64_t total = 0;       // optimizer steps of the run
  int64_t eval_steps = 0;  // 0: no evaluation
  int64_t save_steps = 0;  // 0: no checkpoints
};

struct TrainingRun {
  model::LoadOptions options;  // device and compute dtype included
  DevicePlan device_plan;
  std::shared_ptr<dist::ShardedBase> sharded;  // null unless shard_base
  // On the heap: the residency and the scheduler hold it by reference.
  std::unique_ptr<model::CausalLM> lm;
  RunVocabulary vocabulary;
  lora::LoraConfig lora;           // as saved with the adapter
  std::vector<at::Tensor> params;  // the model's trainable tensors, in the optimizer's order
  int64_t pad_id = 0;
  data::Split split;
  std::unique_ptr<data::DataLoader> loader;      // supervised fine-tuning's
  std::unique_ptr<data::PairLoader> pairs;       // preference tuning's (rl), in place of the loader
  std::vector<data::PreferencePair> eval_pairs;  // preference tuning's held-out pairs, file order
  StepCounts counts;
  LrSchedule lr_schedule;
  std::unique_ptr<Optimizer> optimizer;
  // DPO's and IPO's reference when the run starts from lora_model_dir (Note [Reference adapter]);
  // null: the reference is the base (Note [Adapters off]).
  std::unique_ptr<ReferenceWeights> reference;
  std::shared_ptr<schedule::StreamedWeights> streamed;  // null when every layer is resident
  std::unique_ptr<schedule::LayerScheduler> scheduler;
  schedule::CheckpointPolicy policy = schedule::CheckpointPolicy::every_layer;
  RunState state;  // step 0, or the checkpoint's
};

// Where the run's data is: the loader's or the pair loader's position.
data::DataLoader::Position data_position(const TrainingRun& run);

// Sets up the run of `c` on this rank's `device` (whose CUDA guard the caller holds), printing
// each part to `out`, and resumes it from the checkpoint folder `resume` unless that is empty.
TrainingRun set_up_training(const config::RunConfig& c,
                            dist::Comm& comm,
                            const at::Device& device,
                            const std::filesystem::path& resume,
                            std::FILE* out);

}  // namespace qtrain::engine::train
