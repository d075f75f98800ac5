// See run_state.h.
#include "engine/train/run_state.h"

#include <algorithm>
#include <fstream>
#include <regex>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/config/run_limits.h"
#include "engine/io/crc32c.h"
#include "engine/io/durable_file.h"
#include "engine/io/remove_tree.h"
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
// See Note [Checkpoint checksums].
constexpr const char* kFormat = "qtrain-checkpoint-2";
constexpr const char* kFormatWithoutChecksums = "qtrain-checkpoint-1";

// Note [Checkpoint checksums]
// trainer_state.json, written last, records the CRC-32C of every other file of the checkpoint
// (format qtrain-checkpoint-2), computed from the files as they lie on disk after their flush. A
// resume checks each before reading any: a flipped bit, a truncated copy or an edited file is
// refused with the file's name and the previous checkpoint to use, rather than resumed into a
// damaged adapter or optimizer. trainer_state.json itself is parsed and range-checked instead.
// Checkpoints of format qtrain-checkpoint-1 (before checksums) are read with a warning that
// they cannot be verified.

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

// The regular files of a checkpoint folder other than the state file, by name.
std::vector<std::string> checksummed_files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != kStateFile) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// What to use instead of a damaged checkpoint.
std::string instead_of(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (d.filename().empty()) d = d.parent_path();  // "checkpoint-4/"
  const auto all = list_checkpoints(d.parent_path().empty() ? fs::path(".") : d.parent_path());
  const auto it = std::find_if(all.begin(), all.end(), [&](const fs::path& p) { return p.filename() == d.filename(); });
  if (it != all.end() && it != all.begin()) {
    return "resume from the previous checkpoint, resume_from_checkpoint: " + std::prev(it)->string();
  }
  return "resume from an earlier checkpoint, or start the run again";
}

// See Note [Checkpoint checksums].
void verify_checksums(const fs::path& dir, const nlohmann::json& checksums) {
  const auto state = (dir / kStateFile).string();
  TORCH_CHECK(checksums.is_object() && !checksums.empty(),
              state,
              ": checksums is not a map of file names to CRC-32C values; the checkpoint is damaged, ",
              instead_of(dir));
  for (const auto& [name, value] : checksums.items()) {
    TORCH_CHECK(value.is_string() && fs::path(name).filename() == name && name != kStateFile,
                state,
                ": checksums entry '",
                name.substr(0, 80),
                "' is not a file of the checkpoint with a CRC-32C; the checkpoint is damaged, ",
                instead_of(dir));
    const auto file = dir / name;
    TORCH_CHECK(fs::is_regular_file(file),
                file.string(),
                " is missing (",
                kStateFile,
                " lists it); the checkpoint is incomplete, ",
                instead_of(dir));
    const auto actual = io::crc32c_text(io::crc32c_of_file(file));
    TORCH_CHECK(actual == value.get<std::string>(),
                file.string(),
                " has changed since it was written (checksum ",
                actual,
                ", ",
                kStateFile,
                " recorded ",
                value.get<std::string>().substr(0, 40),
                "): the disk or a copy damaged it; ",
                instead_of(dir));
  }
}

// A count of the state file in [0, hi]; `bound` says what hi is.
int64_t count_in(const nlohmann::json& j, const char* key, int64_t hi, const char* bound, const fs::path& dir) {
  // A float (1e65) converted by get<int64_t>() is undefined behaviour: only integers are counts.
  TORCH_CHECK(j.at(key).is_number_integer(),
              (dir / kStateFile).string(),
              ": ",
              key,
              " is ",
              j.at(key).dump().substr(0, 80),
              ", not a whole number; the checkpoint is damaged, ",
              instead_of(dir));
  const int64_t v = j.at(key).get<int64_t>();
  TORCH_CHECK(v >= 0 && v <= hi,
              (dir / kStateFile).string(),
              ": ",
              key,
              " ",
              v,
              " is outside [0, ",
              hi,
              "] (",
              bound,
              "); the checkpoint is damaged, ",
              instead_of(dir));
  return v;
}

}  // namespace

fs::path save_checkpoint(const fs::path& output_dir,
                         const RunState& state,
                         const Optimizer& optimizer,
                         const lora::LoraConfig& lora,
                         const std::map<std::string, lora::LoraAdapter>& adapters,
                         const std::map<std::string, at::Tensor>& saved_modules,
                         const std::string& base_model,
                         const std::string& run_config_yaml) {
  const auto final_dir = output_dir / ("checkpoint-" + std::to_string(state.global_step));
  const auto tmp = output_dir / ("checkpoint-" + std::to_string(state.global_step) + ".tmp");
  io::remove_tree(tmp);  // a leftover of a crash during an earlier write
  try {
    fs::create_directories(tmp);
    io::save_peft_adapter(tmp, lora, adapters, base_model, at::kFloat, io::AdapterFolder::shared, saved_modules);
    io::safetensors_save(tmp / kOptimizerFile, optimizer.state_tensors());
    std::vector<std::pair<std::string, at::Tensor>> rng;
    for (size_t r = 0; r < state.rng_cpu.size(); ++r) rng.emplace_back(rng_key("cpu", r), state.rng_cpu[r]);
    for (size_t r = 0; r < state.rng_cuda.size(); ++r) rng.emplace_back(rng_key("cuda", r), state.rng_cuda[r]);
    io::safetensors_save(tmp / kRngFile, rng);
    io::write_file_synced(tmp / kConfigFile, run_config_yaml);
    nlohmann::json checksums = nlohmann::json::object();
    for (const auto& name : checksummed_files(tmp)) checksums[name] = io::crc32c_text(io::crc32c_of_file(tmp / name));
    const nlohmann::json j = {{"global_step", state.global_step},
                              {"skipped_steps", state.skipped_steps},
                              {"data_epoch", state.data.epoch},
                              {"data_batch", state.data.batch},
                              {"optimizer", std::string(optimizer.name())},
                              {"world_size", state.world_size},
                              {"format", kFormat},
                              {"checksums", checksums}};
    io::write_file_synced(tmp / kStateFile, j.dump(2) + "\n");  // last: its presence marks a complete checkpoint
    io::fsync_dir(tmp);
  } catch (const std::exception& e) {
    // A full disk, a quota, an I/O error: the half-written folder goes (freeing what it took),
    // and the message says what is still there to resume from.
    std::error_code ignored;
    io::remove_tree(tmp, ignored);
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string why = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
    const auto earlier = list_checkpoints(output_dir);
    TORCH_CHECK(false,
                final_dir.string(),
                " could not be written: ",
                why.substr(0, why.find('\n')),
                ". Its partial files were removed; ",
                earlier.empty() ? std::string("no earlier checkpoint exists in ") + output_dir.string()
                                : "the newest earlier checkpoint, " + earlier.back().string() + ", is intact",
                ". Free space in ",
                output_dir.string(),
                " (or fix the cause above) and resume with resume_from_checkpoint: true");
  }
  if (fs::exists(final_dir)) io::remove_tree(final_dir);  // a re-run reaching the same step
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
  // A state file that does not parse, or lacks a field, belongs to a damaged checkpoint.
  const auto damaged = [&](const nlohmann::json::exception& e) {
    TORCH_CHECK(false,
                (dir / kStateFile).string(),
                ": not a valid trainer state (",
                e.what(),
                "); the checkpoint is damaged, ",
                instead_of(dir));
  };
  std::string format;
  try {
    j = nlohmann::json::parse(contents);
    format = j.at("format").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    damaged(e);
  }
  TORCH_CHECK(format == kFormat || format == kFormatWithoutChecksums,
              (dir / kStateFile).string(),
              ": format '",
              format.substr(0, 80),
              "' is not one this qtrain reads (",
              kFormat,
              ", or ",
              kFormatWithoutChecksums,
              " before checksums); it was written by another program or a newer qtrain: resume it with that, or "
              "start a new run from its adapter with lora_model_dir: ",
              dir.string());
  if (format == kFormat) {
    verify_checksums(dir, j.contains("checksums") ? j.at("checksums") : nlohmann::json());
  } else {
    TORCH_WARN(dir.string(), ": written before checkpoints had checksums (", format, "); its files cannot be verified");
  }
  try {
    constexpr const char* kRunBound = "max_steps' bound: no run takes more steps";
    c.state.global_step = count_in(j, "global_step", config::kMaxSteps, kRunBound, dir);
    c.state.skipped_steps = count_in(j, "skipped_steps", c.state.global_step, "the steps done, global_step", dir);
    c.state.data = {count_in(j, "data_epoch", config::kMaxSteps, kRunBound, dir),
                    count_in(j, "data_batch", config::kMaxSteps, kRunBound, dir)};
    c.optimizer_name = j.value("optimizer", std::string("adamw_torch"));
    // Absent before multi-process runs.
    c.state.world_size =
        j.contains("world_size") ? count_in(j, "world_size", int64_t{1} << 20, "no run has more ranks", dir) : 1;
  } catch (const nlohmann::json::exception& e) {
    damaged(e);
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
  c.saved_modules = std::move(adapter.saved_modules);
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
  for (size_t i = 0; i + keep < all.size(); ++i) io::remove_tree(all[i]);
}

}  // namespace qtrain::engine::train
