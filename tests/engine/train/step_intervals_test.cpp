// Tests for engine/train/step_intervals: evals_per_epoch and saves_per_epoch give the intervals
// that axolotl's fraction and transformers' TrainerState.compute_steps give
// (scripts/reference/axolotl_settings_reference.py), over epochs, counts and run lengths whose
// products round both ways; eval_steps / save_steps given directly win.
#include "engine/train/step_intervals.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/io/remove_tree.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

TEST(StepIntervals, PerEpochCountsGiveTheIntervalsOfAxolotlAndTransformers) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (!python || !*python) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::fresh_test_dir(/*create=*/true);
  // per_epoch,num_epochs,total_steps: exact and rounded-up products, one epoch and several, a
  // fraction of 1 (saves at each epoch's end, no evaluation), runs shorter than the count.
  const std::string cases = "4,1,10 4,1,8 4,1,7 1,1,7 1,4,40 1,3,10 3,3,10 4,4,101 2,3,7 4,1,1 7,3,100 5,2,33 3,1,9";
  const auto out = dir / "intervals.json";
  const std::string cmd = std::string(python) + " " + QTRAIN_SOURCE_DIR +
                          "/scripts/reference/axolotl_settings_reference.py intervals --out " + out.string() +
                          " --cases " + cases;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto reference = nlohmann::json::parse(std::ifstream(out));
  ASSERT_EQ(reference.size(), 13u);
  for (const auto& r : reference) {
    const int64_t n = r.at("per_epoch"), epochs = r.at("num_epochs"), total = r.at("total_steps");
    SCOPED_TRACE(r.dump());
    // The run's steps per epoch only matter for a save at each epoch's end.
    const int64_t steps_per_epoch = (total + epochs - 1) / epochs;
    EXPECT_EQ(eval_interval(0, n, epochs, total), r.at("eval_steps").get<int64_t>());
    const int64_t save = save_interval(0, n, epochs, total, steps_per_epoch);
    if (r.at("save_steps").is_string()) {
      EXPECT_EQ(save, steps_per_epoch);
    } else {
      EXPECT_EQ(save, r.at("save_steps").get<int64_t>());
    }
  }
  qtrain::engine::io::remove_tree(dir);
}

TEST(StepIntervals, StepsGivenDirectlyWin) {
  EXPECT_EQ(eval_interval(5, 0, 3, 100), 5);
  EXPECT_EQ(save_interval(7, 0, 3, 100, 34), 7);
  EXPECT_EQ(eval_interval(0, 0, 3, 100), 0);
  EXPECT_EQ(save_interval(0, 0, 3, 100, 34), 0);
}

}  // namespace
}  // namespace qtrain::engine::train
