// Tests for engine/train/loss_watchdog: the stop comes after `patience` logged losses above the
// threshold in a row, one step after the last of them is logged (axolotl's callback reads the
// log before the step's own line); a loss at or below the threshold resets the count; an
// evaluation in between hides the loss; threshold 0 never stops.
#include "engine/train/loss_watchdog.h"

#include <gtest/gtest.h>

#include <vector>

namespace qtrain::engine::train {
namespace {

// The 1-based step at which the run stops when `losses` are logged one per step; 0: never.
int64_t stop_step(LossWatchdog w, const std::vector<double>& losses, int64_t eval_every = 0) {
  for (size_t i = 0; i < losses.size(); ++i) {
    if (w.step_end()) return static_cast<int64_t>(i) + 1;
    w.logged_loss(losses[i]);
    if (eval_every > 0 && (i + 1) % eval_every == 0) w.logged_eval();
  }
  return 0;
}

TEST(LossWatchdog, StopsAfterPatienceHighLossesInARow) {
  // Steps 1-3 log 6.0; step 4's end sees step 3's loss, the third violation.
  EXPECT_EQ(stop_step(LossWatchdog(5.0, 3), {6, 6, 6, 6, 6}), 4);
  EXPECT_EQ(stop_step(LossWatchdog(5.0, 1), {6, 6}), 2);
}

TEST(LossWatchdog, ALossAtOrBelowTheThresholdResetsTheCount) {
  EXPECT_EQ(stop_step(LossWatchdog(5.0, 3), {6, 6, 5, 6, 6, 4, 6, 6}), 0);
  EXPECT_EQ(stop_step(LossWatchdog(5.0, 3), {6, 6, 5, 6, 6, 6, 1}), 7);
}

TEST(LossWatchdog, AnEvaluationHidesTheLossAndZeroIsOff) {
  // An evaluation after every second step: every other step end sees no loss, so the count
  // grows by one per two steps.
  EXPECT_EQ(stop_step(LossWatchdog(5.0, 2), {6, 6, 6, 6, 6}, /*eval_every=*/2), 4);
  EXPECT_EQ(stop_step(LossWatchdog(0.0, 1), {100, 100, 100}), 0);
}

}  // namespace
}  // namespace qtrain::engine::train
