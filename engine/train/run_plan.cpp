// See run_plan.h. The advice of a plan that does not fit is found by planning again: each
// candidate change of the config (with offload_layers: auto) is kept when its plan fits.
#include "engine/train/run_plan.h"

#include <algorithm>

#include <string>
#include <vector>

#include "engine/io/hf_folder.h"
#include "engine/train/adamw_8bit.h"
#include "engine/train/model_setup.h"

namespace qtrain::engine::train {
namespace {

// Below this, halving sequence_len stops being advice anyone can take.
constexpr int64_t kShortestSequenceAdvised = 128;

offload::MemoryPlan plan_once(
    const config::RunConfig& c, const model::ModelConfig& m, int64_t budget, double h2d, int64_t world_size) {
  offload::PlanRequest request;
  request.world_size = world_size;
  request.shard_base = c.shard_base;
  request.budget_bytes = budget;
  if (!c.offload_layers_auto) request.offload_layers = c.offload_layers;
  request.prefetch_depth = c.offload_prefetch_depth;
  request.offload_activations = c.activation_offloading;
  request.h2d_bytes_per_s = h2d;
  return offload::plan_memory(schedule::estimate_memory(m, memory_shape(c, m)), request);
}

struct Change {
  std::string what;
  config::RunConfig config;
};

std::string outcome(const offload::MemoryPlan& p) {
  return offload::format_bytes(p.total_bytes) + " with " + std::to_string(p.offloaded_layers.size()) +
         " layers offloaded";
}

// The config changes that would make the plan fit, one per line; `c` does not fit.
std::string changes_that_fit(
    const config::RunConfig& c, const model::ModelConfig& m, int64_t budget, double h2d, int64_t world_size) {
  config::RunConfig automatic = c;
  automatic.offload_layers_auto = true;
  automatic.offload_layers = 0;
  const auto plan_of = [&](const config::RunConfig& d) { return plan_once(d, m, budget, h2d, world_size); };

  std::vector<Change> candidates;
  if (!c.offload_layers_auto) candidates.push_back({"offload_layers: auto", automatic});
  config::RunConfig all = automatic;  // every change at once, for when no single one is enough
  if (world_size > 1 && !c.shard_base) {
    config::RunConfig d = automatic;
    d.shard_base = all.shard_base = true;
    candidates.push_back({"shard_base: true (each of the " + std::to_string(world_size) + " ranks keeps 1/" +
                              std::to_string(world_size) + " of the base)",
                          d});
  }
  if (c.gradient_checkpointing != config::GradientCheckpointing::every_layer) {
    config::RunConfig d = automatic;
    d.gradient_checkpointing = all.gradient_checkpointing = config::GradientCheckpointing::every_layer;
    d.gradient_checkpointing_every_k = all.gradient_checkpointing_every_k = 1;
    candidates.push_back({"gradient_checkpointing: true", d});
  }
  if (!c.load_in_4bit) {
    config::RunConfig d = automatic;
    d.load_in_4bit = all.load_in_4bit = true;
    d.load_in_8bit = all.load_in_8bit = false;
    d.adapter = all.adapter = "qlora";
    candidates.push_back({"load_in_4bit: true, adapter: qlora (a 4-bit base)", d});
  }
  for (int64_t mbs = c.micro_batch_size / 2; mbs >= 1; mbs /= 2) {
    config::RunConfig d = automatic;
    d.micro_batch_size = mbs;
    d.gradient_accumulation_steps = (c.gradient_accumulation_steps * c.micro_batch_size + mbs - 1) / mbs;
    all.micro_batch_size = mbs;
    if (plan_of(d).fits || mbs == 1) {
      candidates.push_back({"micro_batch_size: " + std::to_string(mbs) + " with gradient_accumulation_steps: " +
                                std::to_string(d.gradient_accumulation_steps) + " (the same samples per step)",
                            d});
      break;
    }
  }
  for (int64_t len = c.sequence_len / 2; len >= kShortestSequenceAdvised; len /= 2) {
    config::RunConfig d = automatic;
    d.sequence_len = all.sequence_len = len;
    if (plan_of(d).fits || len / 2 < kShortestSequenceAdvised) {
      candidates.push_back({"sequence_len: " + std::to_string(len) + " (longer samples are cut)", d});
      break;
    }
  }

  std::string out;
  for (const Change& change : candidates) {
    const auto p = plan_of(change.config);
    if (p.fits) out += "\n  - " + change.what + ": " + outcome(p);
  }
  if (!out.empty()) return "\nto make it fit, change one of:" + out;
  const auto together = plan_of(all);
  if (together.fits) {
    std::string list;
    for (const Change& change : candidates) list += "\n  - " + change.what;
    return "\nno single change makes it fit; all of these together do (" + outcome(together) + "):" + list;
  }
  return "\nnothing in the config makes it fit: with every layer offloaded and checkpointed, a micro-batch of " +
         std::to_string(all.micro_batch_size) + " and sequence_len " + std::to_string(all.sequence_len) +
         " the step still needs " + offload::format_bytes(together.total_bytes) +
         "; use a GPU with more memory (or raise gpu_memory_limit if it is below the device's memory)";
}

}  // namespace

model::ModelConfig read_model_config(const std::filesystem::path& base_model) {
  return model::ModelConfig::from_json(io::read_config_json(base_model), (base_model / "config.json").string());
}

schedule::MemoryShape memory_shape(const config::RunConfig& c, const model::ModelConfig& m) {
  schedule::MemoryShape s;
  s.quant = quant_spec(c);
  s.quantize_moe_experts = c.quantize_moe_experts;
  s.lora = lora_config(c, m);
  s.dtype = compute_dtype(c, at::Device(at::kCUDA, 0));
  s.device = c10::DeviceType::CUDA;
  // Preference tuning runs a micro-batch of B pairs as 2B rows (Note [Preference batch]). DPO's
  // reference forward comes first, under no gradient, layer by layer: its peak lies below the
  // trained forward's, which the plan counts.
  s.micro_batch_size = c.rl.empty() ? c.micro_batch_size : 2 * c.micro_batch_size;
  s.sequence_len = c.sequence_len;
  // The trainer passes segment and position ids only for packed rows (engine/train/trainer.cpp).
  s.segment_mask = c.sample_packing;
  s.per_row_positions = c.sample_packing;
  s.checkpoint = checkpoint_policy(c);
  s.checkpoint_every_k = c.gradient_checkpointing_every_k;
  s.tiled_mlp = c.tiled_mlp;
  s.tiled_mlp_shards = c.tiled_mlp_num_shards;
  s.micro_batches_per_step = c.gradient_accumulation_steps;
  s.optimizer_8bit = c.optimizer == AdamW8bit::kName;
  // DPO's reference from the starting weights (training_run.cpp): a run that continues an adapter
  // or trains norms (named in lora_modules_to_save or unfrozen_parameters).
  const auto names_a_norm = [](const std::vector<std::string>& names) {
    return std::any_of(
        names.begin(), names.end(), [](const std::string& n) { return n.find("norm") != std::string::npos; });
  };
  s.reference_copy =
      !c.rl.empty() && c.rl != "orpo" && c.rl != "simpo" &&
      (!c.lora_model_dir.empty() || names_a_norm(c.lora_modules_to_save) || names_a_norm(c.unfrozen_parameters));
  return s;
}

int64_t longest_sequence_len(const config::RunConfig& config,
                             const model::ModelConfig& model,
                             int64_t budget_bytes,
                             double h2d_bytes_per_s,
                             int64_t world_size,
                             int64_t granularity) {
  TORCH_CHECK(granularity > 0, "longest_sequence_len: granularity must be positive, got ", granularity);
  config::RunConfig c = config;
  const auto fits = [&](int64_t units) {
    c.sequence_len = units * granularity;
    return plan_once(c, model, budget_bytes, h2d_bytes_per_s, world_size).fits;
  };
  // The step's memory grows with sequence_len, so the lengths that fit are a prefix: bisect it.
  int64_t good = 0, bad = (int64_t{1} << 24) / granularity + 1;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good * granularity;
}

offload::MemoryPlan plan_run(const config::RunConfig& config,
                             const model::ModelConfig& model,
                             int64_t budget_bytes,
                             double h2d_bytes_per_s,
                             int64_t world_size) {
  offload::MemoryPlan plan = plan_once(config, model, budget_bytes, h2d_bytes_per_s, world_size);
  if (!plan.fits) plan.advice += changes_that_fit(config, model, budget_bytes, h2d_bytes_per_s, world_size);
  return plan;
}

}  // namespace qtrain::engine::train
