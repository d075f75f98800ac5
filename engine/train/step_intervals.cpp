// See step_intervals.h.
#include "engine/train/step_intervals.h"

#include <cmath>

namespace qtrain::engine::train {
namespace {

// axolotl's fraction, in the same double arithmetic, so that the ceil rounds as transformers'.
double fraction_of_run(int64_t per_epoch, int64_t num_epochs) {
  return 1.0 / static_cast<double>(per_epoch * num_epochs);
}

int64_t steps_of(double fraction, int64_t total_steps) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * fraction));
}

}  // namespace

int64_t eval_interval(int64_t eval_steps, int64_t evals_per_epoch, int64_t num_epochs, int64_t total_steps) {
  if (eval_steps > 0 || evals_per_epoch <= 0) return eval_steps;
  const double fraction = fraction_of_run(evals_per_epoch, num_epochs);
  return fraction < 1.0 ? steps_of(fraction, total_steps) : 0;
}

int64_t save_interval(
    int64_t save_steps, int64_t saves_per_epoch, int64_t num_epochs, int64_t total_steps, int64_t steps_per_epoch) {
  if (save_steps > 0 || saves_per_epoch <= 0) return save_steps;
  const double fraction = fraction_of_run(saves_per_epoch, num_epochs);
  return fraction < 1.0 ? steps_of(fraction, total_steps) : steps_per_epoch;
}

}  // namespace qtrain::engine::train
