// The preference objectives' losses and metrics as TRL 1.16 computes them: DPO's (DPOTrainer,
// Note [DPO loss]), ORPO's and SimPO's (ORPOTrainer and CPOTrainer, Note [Reference-free losses]).
//
// Note [DPO loss]
// For each pair, with the summed log-probabilities of its chosen and rejected completions under
// the trained model (logps) and the reference (ref_logps: the base, Note [Adapters off]):
//     chosen_logratio   = logps_chosen - ref_logps_chosen      (and likewise rejected)
//     delta             = chosen_logratio - rejected_logratio
//     sigmoid (DPO)     -log sigmoid(beta * delta)
//     hinge             relu(1 - beta * delta)
//     ipo               (chosen_logratio / |chosen| - rejected_logratio / |rejected| - 1 / (2 beta))^2
// where |chosen| counts the completion's tokens (IPO's length normalisation, TRL's choice). A
// micro-batch's loss is the sum over the configured losses of weight * (the mean over its pairs),
// in float32. At the start the adapter is a no-op (B = 0), the log-ratios are 0 and the sigmoid
// loss is ln 2. The metrics, each a mean over the micro-batch's pairs as TRL logs them:
// rewards/chosen = beta * chosen_logratio, rewards/rejected, rewards/accuracies (the fraction of
// pairs whose chosen reward is above the rejected one), rewards/margins (chosen minus rejected
// reward), logps/chosen, logps/rejected.
//
// Note [Reference-free losses]
// ORPO and SimPO need no reference: each completion counts by its mean log-probability per
// predicted token (avg_chosen, avg_rejected; TRL's average_log_prob), and an NLL term of the
// chosen rows keeps the model on them.
//     ORPO (TRL's ORPOTrainer; beta is axolotl's orpo_alpha):
//         log_odds = (avg_chosen - avg_rejected) - (log1mexp(avg_chosen) - log1mexp(avg_rejected))
//         loss     = nll - beta * mean(log_sigmoid(log_odds))
//       with log1mexp(x) = log(1 - e^x) (log1p(-e^x) below -ln 2, else log(-expm1(x))) and nll the
//       mean token cross-entropy over the chosen rows' prompts and completions.
//     SimPO (TRL's CPOTrainer with loss_type simpo):
//         loss = mean(-log_sigmoid(beta * (avg_chosen - avg_rejected - gamma / beta))) + cpo_alpha * nll
//       with nll the mean token cross-entropy over the chosen completions.
// The metrics as for DPO, the rewards being beta * avg (rewards/chosen, rewards/rejected,
// rewards/accuracies, rewards/margins) and logps/* the averages, then nll_loss and, for ORPO,
// log_odds_ratio = mean(log_sigmoid(log_odds)) and log_odds_chosen = mean(log_odds).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace qtrain::engine::train {

enum class DpoLoss { sigmoid, hinge, ipo };

struct DpoOptions {
  double beta = 0.1;
  std::vector<std::pair<DpoLoss, double>> losses = {{DpoLoss::sigmoid, 1.0}};  // loss, weight
};

// Per pair, float32 [B].
struct PairLogps {
  at::Tensor chosen, rejected;                // the trained model's
  at::Tensor ref_chosen, ref_rejected;        // the reference's
  at::Tensor chosen_tokens, rejected_tokens;  // the completions' tokens
};

struct PreferenceLoss {
  at::Tensor loss;  // float32 scalar, differentiable
  // float32 [6], no gradient: rewards/chosen, rewards/rejected, rewards/accuracies,
  // rewards/margins, logps/chosen, logps/rejected
  at::Tensor metrics;
  // float32, no gradient: the objective's own metrics (reference_free_metric_names), or undefined
  at::Tensor extra;
};

PreferenceLoss dpo_loss(const PairLogps& p, const DpoOptions& options);

enum class ReferenceFree { orpo, simpo };

struct ReferenceFreeOptions {
  ReferenceFree objective = ReferenceFree::orpo;
  double beta = 0.1;         // ORPO's (axolotl's orpo_alpha) or SimPO's
  double simpo_gamma = 0.5;  // SimPO's target margin
  double cpo_alpha = 1.0;    // SimPO's weight of the NLL term
};

// avg_chosen, avg_rejected: float32 [B], each completion's mean log-probability per predicted
// token; nll: float32 scalar (see the Note for which tokens).
PreferenceLoss reference_free_loss(const at::Tensor& avg_chosen,
                                   const at::Tensor& avg_rejected,
                                   const at::Tensor& nll,
                                   const ReferenceFreeOptions& options);

// The names of PreferenceLoss::extra, in order: ORPO's nll_loss, log_odds_ratio, log_odds_chosen;
// SimPO's nll_loss.
std::vector<std::string> reference_free_metric_names(ReferenceFree objective);

}  // namespace qtrain::engine::train
