// The largest values the run config accepts for sizes, counts and rates. Each bound is far beyond
// any real run, so that it refuses only a typo or a hostile file, before a product overflows, an
// allocation dies in std::bad_alloc, or a run "trains" forever. docs/RELIABILITY.md lists them
// with their reasons.
#pragma once

#include <cstdint>

namespace qtrain::engine::config {

// LoRA rates are 1e-5 to 1e-3; above 10 the first update already exceeds the weights it changes.
inline constexpr double kMaxLearningRate = 10.0;
// 16 Mi tokens: beyond the longest context of any released model.
inline constexpr int64_t kMaxSequenceLen = int64_t{1} << 24;
inline constexpr int64_t kMaxMicroBatchSize = int64_t{1} << 16;
inline constexpr int64_t kMaxGradientAccumulationSteps = int64_t{1} << 20;
// Tokens of one forward pass (micro_batch_size * sequence_len): 2^31 tokens' ids alone are 16 GiB.
inline constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 31;
// Tokens of one optimizer step (micro_batch_size * gradient_accumulation_steps * sequence_len):
// 16 Gi tokens, a thousand times the largest pretraining batches (about 16 Mi tokens).
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 34;
// Steps of a run and every step interval (max_steps, warmup_steps, save_steps, eval_steps,
// logging_steps): a billion steps is three years at ten steps a second.
inline constexpr int64_t kMaxSteps = 1'000'000'000;
inline constexpr int64_t kMaxEpochs = 1'000'000;
// saves_per_epoch and evals_per_epoch.
inline constexpr int64_t kMaxPerEpoch = 1'000'000;
// A LoRA rank above the widest model's hidden size (about 2^15) adds nothing but memory.
inline constexpr int64_t kMaxLoraRank = int64_t{1} << 16;
inline constexpr int64_t kMaxDatasetProcesses = 4096;
// Seconds: about 115 days, while the HF default is 1800 (2^62 overflowed the milliseconds c10d
// counts in).
inline constexpr int64_t kMaxDdpTimeout = 10'000'000;

}  // namespace qtrain::engine::config
