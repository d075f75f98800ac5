// Learning-rate schedules: linear warmup, then constant, linear decay or half-cosine decay.
//
// The values are the Hugging Face Trainer's to the last bit (transformers' schedule lambdas in
// transformers/optimization.py times the base lr, in double, as torch's LambdaLR applies them),
// so that a qtrain run and a Trainer run with the same config step with the same learning rates.
#pragma once

#include <cstdint>
#include <string>

namespace qtrain::engine::train {

// constant: transformers' constant_with_warmup. Its plain "constant" ignores warmup, which equals
// this with warmup_steps 0.
enum class LrScheduleType { constant, linear, cosine };

struct LrSchedule {
  LrScheduleType type = LrScheduleType::cosine;
  double base_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;

  // The lr of optimizer update `step`, 0-based: the first update uses lr_at(0) (0 when there is
  // warmup). Past total_steps it goes on as transformers' lambdas do (0 for linear; the cosine
  // rises again).
  double lr_at(int64_t step) const;
};

// "constant" or "constant_with_warmup", "linear", "cosine" (axolotl's / the Trainer's
// lr_scheduler names); other names are an error listing these.
LrScheduleType lr_schedule_type_from_name(const std::string& name);
const char* lr_schedule_type_name(LrScheduleType type);

// The warmup length the Trainer uses: `warmup_steps` when > 0, else ceil(total_steps *
// warmup_ratio) (TrainingArguments.get_warmup_steps). Negative values and ratios outside [0, 1]
// are errors naming the key.
int64_t warmup_steps_for(int64_t warmup_steps, double warmup_ratio, int64_t total_steps);

}  // namespace qtrain::engine::train
