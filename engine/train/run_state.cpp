// See run_state.h.
#include "engine/train/run_state.h"

#include <algorithm>
#include <fstream>
#include <regex>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/io/durable_file.h"
#include "engine/io/safetensors.h"
#include "engine/text/json_depth.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kRngFile = "rng_state.safetensors";
constexpr const char* kConfigFile = "run_config.yaml";

// Rank 0's states keep the names of single-process checkpoints ("cpu", "cuda"); rank r's are
// "cpu.rank<r>", "cuda.rank<r>".
std::string rng_key(const std::string& device, size_t rank) {
  return rank == 0 ? device : device + ".rank" + std::to_string(rank);
}

std::optional<int64_t> checkpoint_step(const fs::path& dir) {
  static const std::regex name("checkpoint-([0-9]+)");
  std::smatch m;
  const auto base = dir.filename().string();
  if (!std::regex_match(base, m, name) || !fs::exists(dir / kStateFile)) return std::nullopt;
  return std::stoll(m[1]);
}

}  // namespace

fs::path save_checkpoint(const fs::path& output_dir,
                         const RunState& state,
                         const Optimizer& optimizer,
                         const lora::LoraConfig& lora,
                         const std::map<std::string, lora::LoraAdapter>& adapters,
                         const std::string& base_model,
                         const std::string& run_config_yaml) {
  const auto final_dir = output_dir / ("checkpoint-" + std::to_string(state.global_step));
  const auto tmp = output_dir / ("checkpoint-" + std::to_string(state.global_step) + ".tmp");
  fs::remove_all(tmp);  // a leftover of a crash during an earlier write
  fs::create_directories(tmp);
  io::save_peft_adapter(tmp, lora, adapters, base_model, at::kFloat, io::AdapterFolder::shared);
  io::safetensors_save(tmp / kOptimizerFile, optimizer.state_tensors());
  std::vector<std::pair<std::string, at::Tensor>> rng;
  for (size_t r = 0; r < state.rng_cpu.size(); ++r) rng.emplace_back(rng_key("cpu", r), state.rng_cpu[r]);
  for (size_t r = 0; r < state.rng_cuda.size(); ++r) rng.emplace_back(rng_key("cuda", r), state.rng_cuda[r]);
  io::safetensors_save(tmp / kRngFile, rng);
  const nlohmann::json j = {{"global_step", state.global_step},
                            {"skipped_steps", state.skipped_steps},
                            {"data_epoch", state.data.epoch},
                            {"data_batch", state.data.batch},
                            {"optimizer", std::string(optimizer.name())},
                            {"world_size", state.world_size},
                            {"format", "qtrain-checkpoint-1"}};
  io::write_file_synced(tmp / kConfigFile, run_config_yaml);
  io::write_file_synced(tmp / kStateFile, j.dump(2) + "\n");  // last: its presence marks a complete checkpoint
  io::fsync_dir(tmp);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-run reaching the same step
  fs::rename(tmp, final_dir);
  io::fsync_dir(output_dir);
  return final_dir;
}

CheckpointContents load_checkpoint(const fs::path& dir) {
  TORCH_CHECK(fs::exists(dir / kStateFile),
              dir.string(),
              " is not a complete qtrain checkpoint (no ",
              kStateFile,
              "); point resume_from_checkpoint at an output_dir/checkpoint-N folder, or use true for the newest");
  CheckpointContents c;
  const auto file_problem = text::regular_file_problem(dir / kStateFile, text::kMaxConfigBytes);
  TORCH_CHECK(file_problem.empty(), (dir / kStateFile).string(), " ", file_problem);
  std::ifstream in(dir / kStateFile);
  const std::string contents(std::istreambuf_iterator<char>(in), {});
  const auto depth_problem = text::json_depth_problem(contents);
  TORCH_CHECK(depth_problem.empty(), (dir / kStateFile).string(), ": ", depth_problem);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(contents);
    c.state.global_step = j.at("global_step").get<int64_t>();
    c.state.skipped_steps = j.at("skipped_steps").get<int64_t>();
    c.state.data = {j.at("data_epoch").get<int64_t>(), j.at("data_batch").get<int64_t>()};
    c.optimizer_name = j.value("optimizer", std::string("adamw_torch"));
    c.state.world_size = j.value("world_size", int64_t{1});  // absent before multi-process runs
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, (dir / kStateFile).string(), ": not a valid trainer state (", e.what(), ")");
  }
  TORCH_CHECK(c.state.world_size >= 1,
              (dir / kStateFile).string(),
              ": world_size ",
              c.state.world_size,
              " is not a number of ranks (1 or more); the checkpoint is damaged, resume from an earlier one");
  const auto rng = io::safetensors_load(dir / kRngFile);
  for (int64_t r = 0; r < c.state.world_size; ++r) {
    const auto cpu = rng.find(rng_key("cpu", r));
    TORCH_CHECK(cpu != rng.end(),
                (dir / kRngFile).string(),
                ": no generator state ",
                rng_key("cpu", r),
                " for rank ",
                r,
                " of the ",
                c.state.world_size,
                " in ",
                kStateFile,
                "; the checkpoint is damaged, resume from an earlier one");
    c.state.rng_cpu.push_back(cpu->second.clone());
    if (const auto cuda = rng.find(rng_key("cuda", r)); cuda != rng.end())
      c.state.rng_cuda.push_back(cuda->second.clone());
  }
  for (auto& [k, v] : io::safetensors_load(dir / kOptimizerFile)) c.optimizer.emplace(k, v.clone());
  auto adapter = io::load_peft_adapter(dir);
  c.adapters = std::move(adapter.adapters);
  c.lora = adapter.config;
  return c;
}

void load_optimizer_state(const CheckpointContents& checkpoint, const fs::path& dir, Optimizer& optimizer) {
  TORCH_CHECK(checkpoint.optimizer_name == optimizer.name(),
              dir.string(),
              ": the checkpoint's optimizer state was written by ",
              checkpoint.optimizer_name,
              " but this run's optimizer is ",
              optimizer.name(),
              "; resume with `optimizer: ",
              checkpoint.optimizer_name,
              "`, or start a new run (another output_dir, or resume_from_checkpoint unset) to train with ",
              optimizer.name());
  optimizer.load_state_tensors(checkpoint.optimizer, (dir / kOptimizerFile).string());
}

std::vector<fs::path> list_checkpoints(const fs::path& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (fs::is_directory(output_dir)) {
    for (const auto& e : fs::directory_iterator(output_dir)) {
      if (auto step = checkpoint_step(e.path())) found.emplace_back(*step, e.path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, p] : found) out.push_back(p);
  return out;
}

void prune_checkpoints(const fs::path& output_dir, int64_t keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(output_dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace qtrain::engine::train
