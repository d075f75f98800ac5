// Tests for engine/train/run_state: a checkpoint records the CRC-32C of its files and a resume
// verifies them (a flipped bit in any file is refused, naming the file and the previous
// checkpoint), a table of damaged trainer_state.json files refused with the file, the key and the
// fix while nothing on disk changes, and checkpoints written before checksums still load.
#include "engine/train/run_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/crc32c.h"
#include "engine/io/remove_tree.h"
#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_error;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Every file under `dir` with its bytes: what a refused resume must leave as it was.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().string()] = read_bytes(e.path());
  }
  return out;
}

class RunStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = test::fresh_test_dir(/*create=*/true);
    lora_.r = 2;
    lora_.alpha = 4;
    lora_.target_modules = {"q_proj"};
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
    adapters_.emplace("model.layers.0.self_attn.q_proj", lora::lora_init(8, 8, lora_, gen));
    std::vector<at::Tensor> params;
    for (auto& [name, ad] : adapters_) params.insert(params.end(), {ad.a, ad.b});
    optimizer_ = make_optimizer("adamw_torch", params, AdamWOptions{});
    for (auto& p : params) p.mutable_grad() = at::ones_like(p);
    optimizer_->step(1e-3);
  }
  void TearDown() override { qtrain::engine::io::remove_tree(out_); }

  fs::path save(int64_t step) {
    RunState state;
    state.global_step = step;
    state.data = {0, step};
    state.rng_cpu = {at::detail::getDefaultCPUGenerator().get_state()};
    return save_checkpoint(out_, state, *optimizer_, lora_, adapters_, {}, "base", "base_model: base\n");
  }

  fs::path out_;
  lora::LoraConfig lora_;
  std::map<std::string, lora::LoraAdapter> adapters_;
  std::unique_ptr<Optimizer> optimizer_;
};

TEST_F(RunStateTest, ACheckpointRecordsTheChecksumOfEveryOtherFile) {
  const auto dir = save(2);
  const json state = json::parse(read_bytes(dir / "trainer_state.json"));
  EXPECT_EQ(state.at("format"), "qtrain-checkpoint-2");
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() == "trainer_state.json") continue;
    ++files;
    EXPECT_EQ(state.at("checksums").at(e.path().filename().string()), io::crc32c_text(io::crc32c(read_bytes(e.path()))))
        << e.path();
  }
  EXPECT_EQ(state.at("checksums").size(), files);
  EXPECT_GE(files, 4u);  // adapter weights and config, optimizer, generators, run config
  EXPECT_EQ(load_checkpoint(dir).state.global_step, 2);
}

// A flipped bit anywhere in a checkpoint's files is refused, naming the file and the checkpoint
// to use instead; without checksums the adapter or optimizer would load with a damaged value.
TEST_F(RunStateTest, AFlippedBitInAnyFileIsRefusedNamingTheFileAndThePreviousCheckpoint) {
  const auto previous = save(1);
  const auto dir = save(2);
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() == "trainer_state.json") continue;
    SCOPED_TRACE(e.path().string());
    const std::string good = read_bytes(e.path());
    std::string bad = good;
    bad[bad.size() / 2] ^= 0x10;
    write_bytes(e.path(), bad);
    const auto before = snapshot(out_);
    expect_error([&] { load_checkpoint(dir); },
                 e.path().string() + " has changed since it was written (checksum crc32c:");
    expect_error([&] { load_checkpoint(dir); },
                 "the disk or a copy damaged it; resume from the previous checkpoint, resume_from_checkpoint: " +
                     previous.string());
    EXPECT_EQ(snapshot(out_), before);
    write_bytes(e.path(), good);
  }
  EXPECT_EQ(load_checkpoint(dir).state.global_step, 2);
  // The oldest checkpoint has no previous one.
  const auto weights = previous / "adapter_model.safetensors";
  std::string bad = read_bytes(weights);
  bad.back() ^= 0x01;
  write_bytes(weights, bad);
  expect_error([&] { load_checkpoint(previous); }, "resume from an earlier checkpoint, or start the run again");
}

TEST_F(RunStateTest, AWriteThatFailsLeavesNoPartialFolderAndNamesTheCheckpointToResumeFrom) {
  // scripts/crash_test.sh fills the disk for real; here the adapter write fails (an adapter
  // without tensors) after the folder was made.
  const auto first = save(1);
  const auto before = snapshot(first);
  adapters_.emplace("model.layers.1.self_attn.q_proj", lora::LoraAdapter{});
  test::expect_error([&] { save(2); }, "checkpoint-2 could not be written: ");
  test::expect_error([&] { save(2); },
                     ". Its partial files were removed; the newest earlier checkpoint, " + first.string() +
                         ", is intact. Free space in " + out_.string());
  EXPECT_FALSE(fs::exists(out_ / "checkpoint-2.tmp"));
  EXPECT_FALSE(fs::exists(out_ / "checkpoint-2"));
  EXPECT_EQ(snapshot(first), before);
}

TEST_F(RunStateTest, AMissingFileIsRefusedAsIncomplete) {
  const auto dir = save(3);
  fs::remove(dir / "optimizer.safetensors");
  expect_error([&] { load_checkpoint(dir); },
               (dir / "optimizer.safetensors").string() +
                   " is missing (trainer_state.json lists it); the checkpoint is incomplete");
}

struct BadState {
  std::function<void(json&)> edit;
  std::string fragment;
};

TEST_F(RunStateTest, DamagedTrainerStatesAreRefusedWithTheFileTheKeyAndTheFix) {
  const auto previous = save(1);
  const auto dir = save(2);
  const auto state_file = dir / "trainer_state.json";
  const std::string good = read_bytes(state_file);
  const std::string instead =
      "the checkpoint is damaged, resume from the previous checkpoint, "
      "resume_from_checkpoint: " +
      previous.string();
  const std::vector<BadState> table = {
      {[](json& j) { j["format"] = "qtrain-checkpoint-9"; },
       ": format 'qtrain-checkpoint-9' is not one this qtrain reads (qtrain-checkpoint-2, or qtrain-checkpoint-1 "
       "before checksums); it was written by another program or a newer qtrain"},
      {[](json& j) { j["format"] = "hf-trainer"; }, ": format 'hf-trainer' is not one this qtrain reads"},
      {[](json& j) { j.erase("format"); }, ": not a valid trainer state ("},
      {[](json& j) { j["format"] = 2; }, ": not a valid trainer state ("},
      {[](json& j) { j["global_step"] = int64_t{1'000'000'000'000'000'000}; },
       ": global_step 1000000000000000000 is outside [0, 1000000000] (max_steps' bound: no run takes more steps); " +
           instead},
      {[](json& j) { j["global_step"] = -1; }, ": global_step -1 is outside [0, 1000000000]"},
      {[](json& j) { j["global_step"] = "2"; }, ": global_step is \"2\", not a whole number; " + instead},
      // Fuzzing found that a float reached get<int64_t>(), which is undefined behaviour for 1e65.
      {[](json& j) { j["global_step"] = 1e65; }, ": global_step is 1e+65, not a whole number; " + instead},
      {[](json& j) { j["data_batch"] = 2.5; }, ": data_batch is 2.5, not a whole number"},
      {[](json& j) { j.erase("global_step"); }, ": not a valid trainer state ("},
      {[](json& j) { j["skipped_steps"] = 3; }, ": skipped_steps 3 is outside [0, 2] (the steps done, global_step)"},
      {[](json& j) { j["data_epoch"] = -4; }, ": data_epoch -4 is outside [0, 1000000000]"},
      {[](json& j) { j["data_batch"] = int64_t{1} << 62; }, ": data_batch 4611686018427387904 is outside"},
      {[](json& j) { j["world_size"] = 0; }, ": world_size 0 is not a number of ranks (1 or more)"},
      {[](json& j) { j["world_size"] = 1e65; }, ": world_size is 1e+65, not a whole number"},
      {[](json& j) { j["world_size"] = int64_t{1} << 40; }, ": world_size 1099511627776 is outside [0, 1048576]"},
      {[](json& j) { j["checksums"] = json::array(); }, ": checksums is not a map of file names to CRC-32C values"},
      {[](json& j) { j.erase("checksums"); }, ": checksums is not a map of file names to CRC-32C values"},
      {[](json& j) { j["checksums"]["../../etc/passwd"] = "crc32c:00000000"; },
       ": checksums entry '../../etc/passwd' is not a file of the checkpoint with a CRC-32C"},
      {[](json& j) { j["checksums"]["optimizer.safetensors"] = 5; },
       ": checksums entry 'optimizer.safetensors' is not a file of the checkpoint with a CRC-32C"},
      {[](json& j) { j["checksums"]["optimizer.safetensors"] = "crc32c:00000000"; },
       "optimizer.safetensors has changed since it was written (checksum crc32c:"},
  };
  for (const BadState& row : table) {
    json j = json::parse(good);
    row.edit(j);
    write_bytes(state_file, j.dump());
    SCOPED_TRACE(j.dump());
    const auto before = snapshot(out_);
    expect_error([&] { load_checkpoint(dir); }, row.fragment);
    expect_error([&] { load_checkpoint(dir); }, out_.string());
    EXPECT_EQ(snapshot(out_), before);
  }
  for (const std::string& text : {std::string("[1, 2]"), std::string("{\"format\": "), std::string("")}) {
    write_bytes(state_file, text);
    expect_error([&] { load_checkpoint(dir); }, state_file.string() + ": not a valid trainer state (");
  }
  EXPECT_GE(table.size(), 15u);
}

// See Note [Checkpoint checksums]: a checkpoint of format qtrain-checkpoint-1 has no checksums
// and loads unverified, as it did.
TEST_F(RunStateTest, ACheckpointWrittenBeforeChecksumsStillLoads) {
  const auto dir = save(5);
  json j = json::parse(read_bytes(dir / "trainer_state.json"));
  j["format"] = "qtrain-checkpoint-1";
  j.erase("checksums");
  write_bytes(dir / "trainer_state.json", j.dump());
  const auto ck = load_checkpoint(dir);
  EXPECT_EQ(ck.state.global_step, 5);
  EXPECT_EQ(ck.state.data.batch, 5);
  EXPECT_EQ(ck.adapters.size(), adapters_.size());
}

}  // namespace
}  // namespace qtrain::engine::train
