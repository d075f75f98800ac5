// What a run does with the output_dir it finds: a fresh or empty one is used as it is; one that
// holds another run is refused, or emptied with overwrite_output_dir; resume_from_checkpoint:
// true and auto_resume_from_checkpoints find the newest checkpoint; and an auto-resumed job whose
// earlier attempt died before its first checkpoint starts afresh instead of being refused.
#include "engine/train/output_dir.h"

#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

class OutputDir : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qtrain_output_dir_" + std::to_string(::getpid()));
    qtrain::engine::io::remove_tree(dir_);
    fs::create_directories(dir_);
    c_.output_dir = dir_;
    log_ = std::tmpfile();
  }
  void TearDown() override {
    std::fclose(log_);
    qtrain::engine::io::remove_tree(dir_);
  }
  // A complete checkpoint folder: its trainer_state.json marks it complete.
  void checkpoint(int step) const {
    fs::create_directories(dir_ / ("checkpoint-" + std::to_string(step)));
    std::ofstream(dir_ / ("checkpoint-" + std::to_string(step)) / "trainer_state.json") << "{}";
  }
  void file(const std::string& name) const { std::ofstream(dir_ / name) << "x\n"; }
  std::string logged() const {
    std::rewind(log_);
    std::string s;
    for (int ch; (ch = std::fgetc(log_)) != EOF;) s += static_cast<char>(ch);
    return s;
  }

  fs::path dir_;
  config::RunConfig c_;
  std::FILE* log_ = nullptr;
};

TEST_F(OutputDir, AnEmptyOneIsUsedAndOneHoldingAnotherRunIsRefusedUnlessOverwritten) {
  EXPECT_EQ(prepare_output_dir(c_, log_), fs::path());
  checkpoint(4);
  file("metrics.jsonl");
  test::expect_error([&] { prepare_output_dir(c_, log_); },
                     "already holds a run (checkpoint-4, metrics.jsonl); a new run there would mix");
  EXPECT_TRUE(fs::exists(dir_ / "checkpoint-4"));
  c_.overwrite_output_dir = true;
  EXPECT_EQ(prepare_output_dir(c_, log_), fs::path());
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint-4"));
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
  EXPECT_NE(logged().find("removed the earlier run's checkpoint-4, metrics.jsonl"), std::string::npos);
}

TEST_F(OutputDir, ResumingFindsTheNewestCheckpointAndTrueWithoutOneIsAnError) {
  c_.resume_from_latest_checkpoint = true;
  test::expect_error([&] { prepare_output_dir(c_, log_); }, "holds no checkpoint-N folder to resume from");
  checkpoint(2);
  checkpoint(10);
  fs::create_directories(dir_ / "checkpoint-12");  // being written when the run died: no state file
  file("metrics.jsonl");
  EXPECT_EQ(prepare_output_dir(c_, log_), dir_ / "checkpoint-10");
  c_.resume_from_latest_checkpoint = false;
  c_.auto_resume_from_checkpoints = true;
  EXPECT_EQ(prepare_output_dir(c_, log_), dir_ / "checkpoint-10");
  EXPECT_TRUE(fs::exists(dir_ / "metrics.jsonl"));
}

TEST_F(OutputDir, AnAutoResumedJobWhoseLastAttemptDiedBeforeItsFirstCheckpointStartsAfresh) {
  // scripts/crash_test.sh found it: a restart loop killed before the first save was refused
  // forever, since the metrics of the dead attempt looked like another run.
  file("metrics.jsonl");
  fs::create_directories(dir_ / "runs");
  c_.auto_resume_from_checkpoints = true;
  EXPECT_EQ(prepare_output_dir(c_, log_), fs::path());
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
  EXPECT_NE(logged().find("an earlier attempt left no checkpoint; starting afresh"), std::string::npos);
  // A finished run's adapter is another matter: refused as before.
  file("adapter_model.safetensors");
  file("metrics.jsonl");
  test::expect_error([&] { prepare_output_dir(c_, log_); }, "already holds a run");
  EXPECT_TRUE(fs::exists(dir_ / "adapter_model.safetensors"));
  // Without auto-resume, the dead attempt's logs are refused as another run's.
  fs::remove(dir_ / "adapter_model.safetensors");
  c_.auto_resume_from_checkpoints = false;
  test::expect_error([&] { prepare_output_dir(c_, log_); }, "already holds a run (metrics.jsonl)");
}

}  // namespace
}  // namespace qtrain::engine::train
