// See preference_step.h.
#include "engine/train/preference_step.h"

#include <ATen/ATen.h>

#include "engine/lora/adapters_off.h"
#include "engine/train/preference_loss.h"
#include "ops/nn/cross_entropy.h"

namespace qtrain::engine::train {

StepSums preference_forward_backward(TrainingRun& run,
                                     const schedule::ExecutionPlan& plan,
                                     const std::vector<std::vector<data::PreferencePair>>& batches,
                                     const config::RunConfig& c,
                                     double aux_coef) {
  auto& scheduler = *run.scheduler;
  const auto& lm = *run.lm;
  const auto& device = run.options.device;
  const DpoOptions options{c.rl_beta, {{c.rl == "ipo" ? DpoLoss::ipo : DpoLoss::sigmoid, 1.0}}};
  const double share = 1.0 / static_cast<double>(run.counts.step_batches);
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  StepSums sums{
      at::zeros({}, f64), at::zeros({}, f64), at::zeros({static_cast<int64_t>(kPreferenceMetrics.size())}, f64)};
  for (const auto& pairs : batches) {
    const auto b = data::collate_pairs(pairs, c.sequence_len, run.pad_id);
    const auto ids = b.input_ids.to(device), labels = b.labels.to(device);
    at::Tensor ref;
    {
      const lora::AdaptersOff off;  // the reference: the base (Note [Adapters off])
      ref = lm.sequence_log_probs(scheduler.eval_hidden(scheduler.prepare_eval(), ids), labels);
    }
    scheduler.prepare_training(run.policy, c.gradient_checkpointing_every_k);
    const auto h = scheduler.train_hidden(plan, schedule::StepInputs{ids, labels, {}, {}, {}});
    const auto logps = lm.sequence_log_probs(h, labels);
    const int64_t n = b.pairs;
    // A completion's tokens (IPO's length), and those a position predicts (the logits metrics').
    const auto completion = (b.labels != ops::kIgnoreIndex).sum(1).to(at::kFloat).to(device);
    const auto predicted =
        (b.labels.narrow(1, 1, b.labels.size(1) - 1) != ops::kIgnoreIndex).sum(1).to(at::kFloat).to(device);
    const auto r = dpo_loss({logps.narrow(0, 0, n),
                             logps.narrow(0, n, n),
                             ref.narrow(0, 0, n),
                             ref.narrow(0, n, n),
                             completion.narrow(0, 0, n),
                             completion.narrow(0, n, n)},
                            options);
    auto objective = r.loss;
    if (const auto& aux = scheduler.aux_loss(); aux.defined()) {
      objective = objective + aux_coef * aux;
      sums.aux = sums.aux + aux.detach().to(at::kDouble);
    }
    (objective * share).backward();
    sums.recomputed += scheduler.stats().layers_recomputed;
    sums.loss = sums.loss + objective.detach().to(at::kDouble) * share;
    const auto logit_sums = lm.predicted_logit_mean_sums(h.detach(), labels);
    auto mean_logits = [&](int64_t first) {
      const auto tokens = predicted.narrow(0, first, n).sum();
      return at::where(tokens > 0, logit_sums.narrow(0, first, n).sum() / tokens.clamp_min(1), at::zeros_like(tokens));
    };
    sums.metrics = sums.metrics + at::cat({r.metrics, at::stack({mean_logits(0), mean_logits(n)})}).to(at::kDouble);
  }
  return sums;
}

}  // namespace qtrain::engine::train
