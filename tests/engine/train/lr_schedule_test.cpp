// LR schedules: bitwise the learning rates transformers' schedulers give the Trainer (constant
// with warmup, linear, cosine; no warmup, 3 warmup steps, a warmup ratio), and the name and
// warmup conversions with their errors.
#include "engine/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <bit>
#include <map>

#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::train {
namespace {

using test::expect_error;

// The tensors of `optim_reference.py schedules`, made once per process (the script takes seconds).
const test::ScriptTensors& schedules_reference() {
  static const test::ScriptTensors reference = test::run_reference_script("optim_reference.py", "schedules");
  return reference;
}

TEST(LrSchedule, EqualsTransformersBitwiseForEveryScheduleAndWarmup) {
  const auto& ref = schedules_reference();
  if (ref.skipped) GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
  ASSERT_TRUE(ref.error.empty()) << ref.error;

  // The script's settings: base lr 2e-4, 20 training steps, 22 recorded (two past the end).
  constexpr int64_t kTotal = 20;
  constexpr int64_t kRecorded = 22;
  const std::map<std::string, int64_t> warmups{
      {"w0", warmup_steps_for(0, 0.0, kTotal)},
      {"w3", warmup_steps_for(3, 0.0, kTotal)},
      {"r0.1", warmup_steps_for(0, 0.1, kTotal)},
  };
  int64_t compared = 0;
  for (const auto& [warmup_case, warmup] : warmups) {
    EXPECT_EQ(warmup, ref.tensors.at("warmup." + warmup_case).item<int64_t>()) << warmup_case;
    for (const auto type : {LrScheduleType::constant, LrScheduleType::linear, LrScheduleType::cosine}) {
      const std::string key = std::string("lr.") + lr_schedule_type_name(type) + "." + warmup_case;
      const auto expected = ref.tensors.at(key);
      ASSERT_EQ(expected.numel(), kRecorded) << key;
      const LrSchedule schedule{type, 2e-4, warmup, kTotal};
      for (int64_t step = 0; step < kRecorded; ++step) {
        const double ours = schedule.lr_at(step);
        const double theirs = expected[step].item<double>();
        EXPECT_EQ(std::bit_cast<uint64_t>(ours), std::bit_cast<uint64_t>(theirs))
            << key << " step " << step << ": " << ours << " vs " << theirs;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 3 * 3 * kRecorded);
}

TEST(LrSchedule, WarmsUpFromZeroAndDecaysToZeroAtTheEnd) {
  for (const auto type : {LrScheduleType::linear, LrScheduleType::cosine}) {
    const LrSchedule schedule{type, 1e-3, 4, 10};
    EXPECT_EQ(schedule.lr_at(0), 0.0);
    EXPECT_EQ(schedule.lr_at(2), 0.5e-3);
    EXPECT_EQ(schedule.lr_at(4), 1e-3);
    EXPECT_EQ(schedule.lr_at(10), 0.0);
  }
  const LrSchedule constant{LrScheduleType::constant, 1e-3, 0, 10};
  EXPECT_EQ(constant.lr_at(0), 1e-3);
  EXPECT_EQ(constant.lr_at(100), 1e-3);
  expect_error([&] { constant.lr_at(-1); }, "LrSchedule::lr_at: step is -1");
}

TEST(LrSchedule, NamesAndWarmupConversion) {
  EXPECT_EQ(lr_schedule_type_from_name("constant"), LrScheduleType::constant);
  EXPECT_EQ(lr_schedule_type_from_name("constant_with_warmup"), LrScheduleType::constant);
  EXPECT_EQ(lr_schedule_type_from_name("linear"), LrScheduleType::linear);
  EXPECT_EQ(lr_schedule_type_from_name("cosine"), LrScheduleType::cosine);
  expect_error([] { lr_schedule_type_from_name("cosine_with_restarts"); },
               "lr_scheduler 'cosine_with_restarts' is not supported; use one of constant, constant_with_warmup, "
               "linear, cosine");

  // warmup_steps wins over warmup_ratio; the ratio rounds up, as the Trainer's does.
  EXPECT_EQ(warmup_steps_for(5, 0.5, 100), 5);
  EXPECT_EQ(warmup_steps_for(0, 0.5, 100), 50);
  EXPECT_EQ(warmup_steps_for(0, 0.03, 10), 1);
  EXPECT_EQ(warmup_steps_for(0, 0.0, 10), 0);
  expect_error([] { warmup_steps_for(-1, 0.0, 10); }, "warmup_steps is -1; it must be >= 0");
  expect_error([] { warmup_steps_for(0, 1.5, 10); }, "warmup_ratio is 1.5; it must be in [0, 1]");
}

}  // namespace
}  // namespace qtrain::engine::train
