// See lr_schedule.h.
#include "engine/train/lr_schedule.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace qtrain::engine::train {
namespace {

// transformers' lr lambdas (optimization.py), written with the same operations in the same
// order: Python's float() of an int is exact here, and max(a, b) and std::max(a, b) both return
// a unless b > a.
double lr_lambda(const LrSchedule& s, int64_t step) {
  // constant_with_warmup divides by max(1.0, warmup), the others by max(1, warmup): same value.
  if (step < s.warmup_steps) {
    return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, s.warmup_steps));
  }
  const double decay_steps = static_cast<double>(std::max<int64_t>(1, s.total_steps - s.warmup_steps));
  switch (s.type) {
    case LrScheduleType::constant:
      return 1.0;
    case LrScheduleType::linear:
      return std::max(0.0, static_cast<double>(s.total_steps - step) / decay_steps);
    case LrScheduleType::cosine: {
      const double num_cycles = 0.5;
      const double progress = static_cast<double>(step - s.warmup_steps) / decay_steps;
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
    }
  }
  TORCH_CHECK(false, "unknown LrScheduleType ", static_cast<int>(s.type));
}

}  // namespace

double LrSchedule::lr_at(int64_t step) const {
  TORCH_CHECK(step >= 0, "LrSchedule::lr_at: step is ", step, "; steps count from 0");
  return base_lr * lr_lambda(*this, step);
}

LrScheduleType lr_schedule_type_from_name(const std::string& name) {
  if (name == "constant" || name == "constant_with_warmup") return LrScheduleType::constant;
  if (name == "linear") return LrScheduleType::linear;
  if (name == "cosine") return LrScheduleType::cosine;
  TORCH_CHECK(false,
              "lr_scheduler '",
              name,
              "' is not supported; use one of constant, constant_with_warmup, ",
              "linear, cosine");
}

const char* lr_schedule_type_name(LrScheduleType type) {
  switch (type) {
    case LrScheduleType::constant:
      return "constant";
    case LrScheduleType::linear:
      return "linear";
    case LrScheduleType::cosine:
      return "cosine";
  }
  return "unknown";
}

int64_t warmup_steps_for(int64_t warmup_steps, double warmup_ratio, int64_t total_steps) {
  TORCH_CHECK(warmup_steps >= 0, "warmup_steps is ", warmup_steps, "; it must be >= 0");
  TORCH_CHECK(warmup_ratio >= 0.0 && warmup_ratio <= 1.0,
              "warmup_ratio is ",
              warmup_ratio,
              "; it must be in [0, 1] (a fraction of the total steps)");
  TORCH_CHECK(total_steps >= 0, "the total number of training steps is ", total_steps, "; it must be >= 0");
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

}  // namespace qtrain::engine::train
