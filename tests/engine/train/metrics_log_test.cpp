// metrics.jsonl across a resume, and the TensorBoard files read back by TensorBoard's own
// EventAccumulator (scripts/reference/tensorboard_check.py through $QTRAIN_PYTHON).
#include "engine/train/metrics_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

// Two runs' worth of records: the second as a run resumed from the first's step-2 checkpoint.
// Values such as 0.1 and 1e-4 are not floats, so the TensorBoard check covers the rounding.
std::vector<json> first_run() {
  return {
      {{"step", 1}, {"epoch", 0.25}, {"loss", 2.5}, {"learning_rate", 1e-4}, {"grad_norm", 1.125}},
      {{"step", 2}, {"epoch", 0.5}, {"loss", 2.1}, {"learning_rate", 2e-4}, {"grad_norm", 0.75}, {"phase", "warmup"}},
      {{"step", 2}, {"epoch", 0.5}, {"eval_loss", 2.3}, {"eval_runtime", 0.5}},
  };
}
std::vector<json> second_run() {
  return {
      {{"step", 3}, {"epoch", 0.75}, {"loss", 1.9}, {"learning_rate", 1.5e-4}, {"grad_norm", 0.5}},
      {{"step", 4}, {"epoch", 1.0}, {"loss", 1.7}, {"learning_rate", 1e-4}, {"grad_norm", 0.25}, {"tokens", 4096}},
      {{"step", 4}, {"epoch", 1.0}, {"eval_loss", 1.8}, {"eval_runtime", 0.25}},
  };
}

class MetricsLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/false); }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  // Logs both runs, each through its own MetricsLog, as a run and its resumption would.
  std::vector<json> log_two_runs(bool tensorboard) {
    std::vector<json> all;
    for (const auto& run : {first_run(), second_run()}) {
      MetricsLog log(dir_, tensorboard);
      EXPECT_EQ(log.jsonl_path(), dir_ / "metrics.jsonl");
      for (const json& record : run) {
        log.log(record);
        all.push_back(record);
      }
    }
    return all;
  }

  fs::path dir_;
};

TEST(TensorBoardTagTest, FollowsTransformersRewriteLogs) {
  EXPECT_EQ(tensorboard_tag("loss"), "train/loss");
  EXPECT_EQ(tensorboard_tag("learning_rate"), "train/learning_rate");
  EXPECT_EQ(tensorboard_tag("eval_loss"), "eval/loss");
  EXPECT_EQ(tensorboard_tag("test_loss"), "test/loss");
  EXPECT_EQ(tensorboard_tag("evaluation"), "train/evaluation");
}

TEST_F(MetricsLogTest, JsonlContinuesAcrossAResumeOneRecordPerLine) {
  const std::vector<json> records = log_two_runs(/*tensorboard=*/false);
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
  const std::vector<std::string> lines = read_lines(dir_ / "metrics.jsonl");
  ASSERT_EQ(lines.size(), records.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(json::parse(lines[i]), records[i]) << "line " << i + 1 << ": " << lines[i];
  }
}

TEST_F(MetricsLogTest, EachLineReachesTheFileBeforeTheNextLog) {
  MetricsLog log(dir_, /*tensorboard=*/true);
  log.log({{"step", 1}, {"loss", 2.5}});
  EXPECT_EQ(read_text(log.jsonl_path()), "{\"loss\":2.5,\"step\":1}\n");
  ASSERT_NE(log.tensorboard(), nullptr);
  // Version record (16 + 24 bytes) and the loss record are on disk without a flush() call.
  EXPECT_GT(fs::file_size(log.tensorboard()->path()), 40u);
}

TEST_F(MetricsLogTest, ALineTornByACrashStaysOnItsOwnLine) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"lo";
  {
    MetricsLog log(dir_, /*tensorboard=*/false);
    log.log({{"step", 2}, {"loss", 2.0}});
  }
  const std::vector<std::string> lines = read_lines(dir_ / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "{\"step\":2,\"lo");
  EXPECT_EQ(json::parse(lines[2]), json({{"step", 2}, {"loss", 2.0}}));
}

TEST_F(MetricsLogTest, ErrorsNameTheRecordOrThePathAndTheFix) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  test::expect_error([&] { MetricsLog log(dir_ / "file" / "out", false); },
                     "cannot create the output directory " + (dir_ / "file" / "out").string());
  fs::create_directories(dir_ / "out" / "metrics.jsonl");  // a folder where the file should be
  test::expect_error([&] { MetricsLog log(dir_ / "out", false); },
                     "cannot open " + (dir_ / "out" / "metrics.jsonl").string() + " for appending");

  MetricsLog log(dir_, false);
  test::expect_error([&] { log.log({{"loss", 1.0}}); }, "metrics record has no integer \"step\": {\"loss\":1.0}");
  test::expect_error([&] { log.log({{"step", 1.5}}); }, "no integer \"step\"");
  test::expect_error([&] { log.log(json::array({1, 2})); }, "must be a JSON object");
  EXPECT_EQ(read_text(log.jsonl_path()), "");
}

TEST_F(MetricsLogTest, TensorBoardReadsTheScalarsUnderTransformersTags) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (python == nullptr || *python == '\0') {
    GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
  }
  const std::vector<json> records = log_two_runs(/*tensorboard=*/true);
  // The resumed run started a second event file (in the same second, hence the ".1" name).
  size_t event_files = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "runs")) {
    event_files += entry.path().filename().string().find("tfevents") != std::string::npos;
  }
  EXPECT_EQ(event_files, 2u);

  // What TensorBoard should show: every numeric field but step and epoch, at the record's step.
  json expected = json::object();
  for (const json& record : records) {
    for (const auto& [key, value] : record.items()) {
      if (key != "step" && key != "epoch" && value.is_number()) {
        expected[tensorboard_tag(key)].push_back({record.at("step"), value});
      }
    }
  }
  ASSERT_TRUE(expected.contains("train/loss") && expected.contains("train/learning_rate") &&
              expected.contains("eval/loss"));
  EXPECT_FALSE(expected.contains("train/phase"));
  std::ofstream(dir_ / "expected.json") << expected.dump(2);

  const fs::path script = fs::path(QTRAIN_SOURCE_DIR) / "scripts" / "reference" / "tensorboard_check.py";
  const fs::path out = dir_ / "check.log";
  const std::string command = "'" + std::string(python) + "' '" + script.string() + "' '" + (dir_ / "runs").string() +
                              "' '" + (dir_ / "expected.json").string() + "' > '" + out.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  EXPECT_EQ(status, 0) << command << "\n" << read_text(out);
}

}  // namespace
}  // namespace qtrain::engine::train
