// axolotl's loss_watchdog_threshold / loss_watchdog_patience: stop a run whose loss stays high.
#pragma once

#include <cstdint>

namespace qtrain::engine::train {

// As axolotl's LossWatchDogCallback (src/axolotl/utils/callbacks/__init__.py): at the end of each
// step it looks at the newest logged loss, which is the previous logged step's, since the step's
// own line is written after the callback; a loss above the threshold counts a violation, one at
// or below it resets the count, and `patience` violations in a row stop the run. An evaluation
// logged since hides the loss (the newest entry then has none), as in the Trainer's log_history.
class LossWatchdog {
 public:
  // threshold 0: off.
  LossWatchdog(double threshold, int64_t patience) : threshold_(threshold), patience_(patience) {}

  // At a step's end, before its own line is logged. True: stop the run.
  bool step_end() {
    if (threshold_ <= 0 || !has_newest_) return false;
    violations_ = newest_ > threshold_ ? violations_ + 1 : 0;
    return violations_ >= patience_;
  }
  void logged_loss(double loss) {
    newest_ = loss;
    has_newest_ = true;
  }
  void logged_eval() { has_newest_ = false; }

 private:
  double threshold_;
  int64_t patience_;
  int64_t violations_ = 0;
  // The newest log entry's loss; none before the first line and after an evaluation.
  bool has_newest_ = false;
  double newest_ = 0;
};

}  // namespace qtrain::engine::train
