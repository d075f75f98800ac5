// Preference tuning's forward-and-loss phase of a step (Note [Training phases]): each micro-batch
// of pairs (Note [Preference batch]) through the trained model, and for DPO and IPO through the
// reference first (the base, Note [Adapters off]); the objective's loss (Note [DPO loss], Note
// [Reference-free losses]) differentiated, its metrics summed on the device.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/config/run_config.h"
#include "engine/data/preference_pairs.h"
#include "engine/dist/comm.h"
#include "engine/schedule/execution_plan.h"
#include "engine/train/training_run.h"

namespace qtrain::engine::train {

// What a step's forward and backward leave on the device (float64; Note [Steps decided on the
// device] in trainer.cpp).
struct StepSums {
  at::Tensor loss;  // supervised: this rank's summed token losses; preference: its share of the step's loss
  at::Tensor aux;   // this rank's load-balancing losses, summed
  // preference: preference_metric_names' summed over this rank's micro-batches; else undefined
  at::Tensor metrics = {};
  int64_t recomputed = 0;
};

// TRL's names of the metrics of objective `rl` (dpo, ipo, orpo, simpo, kto), as metrics.jsonl and
// TensorBoard show them: the rewards, logps and logits of the chosen and rejected completions,
// then the objective's own (ORPO's nll_loss, log_odds_ratio, log_odds_chosen; SimPO's nll_loss);
// KTO's kl first and no rewards/accuracies.
std::vector<std::string> preference_metric_names(const std::string& rl);

// The values a micro-batch of objective `rl` adds up (StepSums::metrics): one per metric, and for
// KTO one more per metric, its count (Note [KTO loss]: a micro-batch may lack a metric).
int64_t preference_metric_slots(const std::string& rl);

// The logged metrics of `values` (preference_metric_slots' sums over micro-batches, or their means:
// the same ratios), as TRL logs them with `prefix` ("" or "eval_"): each sum over its count for
// KTO, a metric without a count left out; the values themselves for the others.
std::vector<std::pair<std::string, double>> preference_metrics(const std::string& rl,
                                                               const std::vector<double>& values,
                                                               const std::string& prefix);

// The progress line's part of `metrics` (preference_metrics' with `prefix`): " | margin M | acc A"
// (rewards/margins and rewards/accuracies), or KTO's " | kl K | margin M"; what is not logged is
// left out.
std::string preference_progress(const std::vector<std::pair<std::string, double>>& metrics, const std::string& prefix);

// Each micro-batch's loss is the objective's (rl) plus aux_coef times its load-balancing loss,
// differentiated at 1 / step_batches, as the HF Trainer divides by the accumulation steps and DDP
// averages the ranks; StepSums::loss is the sum of those shares, the step's mean loss once summed
// over the ranks. The metrics are each micro-batch's means (logits/* weighted by the positions
// they average over), as TRL logs one value per micro-batch.
StepSums preference_forward_backward(TrainingRun& run,
                                     const schedule::ExecutionPlan& plan,
                                     const std::vector<std::vector<data::PreferencePair>>& batches,
                                     const config::RunConfig& c,
                                     double aux_coef);

// Note [Precomputed reference]
// With precompute_ref_log_probs (TRL's DPOTrainer option of the same name), one pass before the
// first step computes the reference's log-likelihoods of every training pair's chosen and rejected
// rows, then every held-out pair's, in file order, precompute_ref_batch_size pairs at a time
// (micro_batch_size where 0), under no gradient; the steps and evaluations then read them instead
// of running the reference, which saves one forward per micro-batch. The reference never changes,
// so a resumed run computes the same values again. They can differ from a step's own reference
// forward in the last float32 bits, since the pairs are padded to other widths there (TRL's do
// too). Rank r computes batches r, r + world_size, ... of the pass, and the values are summed over
// the ranks (each is computed by one), so the ranks share the work and all hold every value.
void precompute_reference(TrainingRun& run, const config::RunConfig& c, dist::Comm& comm, std::FILE* out);

// The held-out pairs' loss (mean over the pairs, as the HF Trainer's evaluation averages a batch's
// loss over its rows) and TRL's metrics with the prefix eval_ (means over the micro-batches, as
// TRL logs the stored ones), the reference and the model under no gradient. Rank r evaluates
// micro-batches r, r + world_size, ...; the sums are summed over the ranks (one host read).
struct PairEvaluation {
  double loss = 0;
  std::vector<std::pair<std::string, double>> metrics;
};
PairEvaluation evaluate_pairs(TrainingRun& run, const config::RunConfig& c, dist::Comm& comm);

}  // namespace qtrain::engine::train
