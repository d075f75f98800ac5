// The preference objectives' losses and metrics as TRL 1.16 computes them: DPO's (DPOTrainer,
// Note [DPO loss]), ORPO's and SimPO's (ORPOTrainer and CPOTrainer, Note [Reference-free losses]),
// KTO's (KTOTrainer, Note [KTO loss]).
//
// Note [DPO loss]
// For each pair, with the summed log-probabilities of its chosen and rejected completions under
// the trained model (logps) and the reference (ref_logps: the base, Note [Adapters off]):
//     chosen_logratio   = logps_chosen - ref_logps_chosen      (and likewise rejected)
//     delta             = chosen_logratio - rejected_logratio
// and TRL's DPOTrainer losses per pair, with eps its label_smoothing:
//     sigmoid (DPO)  -log sigmoid(beta * delta)
//     hinge          relu(1 - beta * delta)
//     ipo            (chosen_logratio / |chosen| - rejected_logratio / |rejected| - 1 / (2 beta))^2
//     sigmoid_norm   -log sigmoid(beta * (chosen_logratio / |chosen| - rejected_logratio / |rejected|))
//     robust         (-(1 - eps) log sigmoid(beta delta) + eps log sigmoid(-beta delta)) / (1 - 2 eps)
//     exo_pair       q log(q / (1 - eps)) + (1 - q) log((1 - q) / eps), q = sigmoid(beta delta)
//     nca_pair       -log sigmoid(c) - log sigmoid(-c) / 2 - log sigmoid(-r) / 2
//     bco_pair       -log sigmoid(c) - log sigmoid(-r)
//     sppo_hard      (chosen_logratio - 1 / (2 beta))^2 + (rejected_logratio + 1 / (2 beta))^2
//     apo_zero       1 - sigmoid(c) + sigmoid(r)
//     apo_down       sigmoid(c) + 1 - sigmoid(c - r)
//     discopop       -log sigmoid(beta delta) (1 - m) + exp(-beta delta) m, m = sigmoid(beta delta / tau)
//     aot, aot_unpaired   -(1 - eps) log sigmoid(beta d) - eps log sigmoid(-beta d), with d the
//                    difference of the sorted (over the micro-batch) logps_chosen - logps_rejected
//                    and ref_ ones (aot), or of the sorted chosen and rejected log-ratios (unpaired)
//     sft            the mean NLL of the chosen completions' predicted tokens (one value for all pairs)
// where c = beta * chosen_logratio, r = beta * rejected_logratio, and |chosen| counts the
// completion's tokens (IPO's length normalisation, TRL's choice). A micro-batch's loss is the sum
// over the configured losses of weight * (the mean over its pairs), in float32 (TRL's loss_type
// list with its loss_weights; axolotl's dpo_loss_type and dpo_loss_weights).
// TRL's three variations of these, each off by default:
//   - f_divergence_type (f-DPO): the losses built on the difference of the two log-ratios (sigmoid,
//     hinge, ipo, sigmoid_norm, robust, exo_pair, discopop) take it between scores f'(ratio)
//     instead: reverse_kl the log-ratio itself (DPO), forward_kl 1 - exp(-logratio), js_divergence
//     ln 2 + log sigmoid(logratio), alpha_divergence (exp((a - 1) logratio) - 1) / (a - 1) with
//     (a - 1) logratio capped at 80 (a = f_alpha_divergence_coef; a = 1 is reverse_kl). The other
//     losses have no such form: TRL refuses them with another divergence, and so does the run config.
//   - ld_alpha (LD-DPO): a completion's log-likelihood, the model's and the reference's, sums its
//     first min(|chosen|, |rejected|) predicted tokens as they are and the rest times ld_alpha,
//     so the longer completion's tail counts less; every value above reads these (the metrics too),
//     but sft, which reads the chosen completions' plain log-likelihoods (chosen_sft).
//   - use_weighting (WPO): each pair's loss, of every configured loss, is multiplied by w_chosen *
//     w_rejected (no gradient), w = exp(mean over the completion's predicted tokens of log p(token)
//     - log sum_v p_v^2) under the trained model (PairLogps::weights).
// At the start the
// adapter is a no-op (B = 0), the log-ratios are 0 and the sigmoid loss is ln 2. The metrics, each
// a mean over the micro-batch's pairs as TRL logs them, whatever the losses: rewards/chosen = beta *
// chosen_logratio, rewards/rejected, rewards/accuracies (the fraction of pairs whose chosen reward
// is above the rejected one), rewards/margins (chosen minus rejected reward), logps/chosen,
// logps/rejected.
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
//
// Note [KTO loss]
// KTO (TRL's KTOTrainer, loss_type kto) scores a micro-batch of B unpaired rows (Note [KTO rows]
// in engine/data/kto_rows.h) by the summed log-probabilities of each row's completion (logps) and
// of its KL row's (kl_logps), under the trained model and the reference:
//     kl        = max(0, mean over the B rows of (kl_logps - ref_kl_logps))   no gradient
//     logratio  = logps - ref_logps
//     desirable   row: desirable_weight   * (1 - sigmoid(beta * (logratio - kl)))
//     undesirable row: undesirable_weight * (1 - sigmoid(beta * (kl - logratio)))
// and the loss is the mean of the B rows' losses (the desirable rows' first, TRL's nanmean of
// their concatenation). TRL's loss_type apo_zero_unpaired (the APO paper's unpaired loss) has no
// KL term and no KL rows: kl is 0, desirable rows score 1 - sigmoid(beta * logratio) and
// undesirable rows sigmoid(beta * logratio), weighted as above. At the start (B = 0 in the adapter) the log-ratios and
// kl are 0 and the loss is the mean weight / 2. The metrics: kl; rewards/chosen (beta * logratio) and logps/chosen,
// means over the desirable rows, and likewise rewards/rejected and logps/rejected over the
// undesirable ones; rewards/margins, the two rewards' difference. A micro-batch without desirable
// (or undesirable) rows has no such metric: TRL logs each as the mean over the micro-batches that
// have it, so each metric travels with a count (PreferenceLoss::counts).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace qtrain::engine::train {

enum class DpoLoss {
  sigmoid,
  hinge,
  ipo,
  sigmoid_norm,
  robust,
  exo_pair,
  nca_pair,
  bco_pair,
  sppo_hard,
  apo_zero,
  apo_down,
  discopop,
  aot,
  aot_unpaired,
  sft
};

// The loss of TRL's name `name` (the run config's dpo_loss_type); throws on another name.
DpoLoss dpo_loss_named(const std::string& name);

enum class FDivergence { reverse_kl, forward_kl, js_divergence, alpha_divergence };

// The divergence of TRL's name `name` (the run config's f_divergence_type); throws on another name.
FDivergence f_divergence_named(const std::string& name);

struct DpoOptions {
  double beta = 0.1;
  std::vector<std::pair<DpoLoss, double>> losses = {{DpoLoss::sigmoid, 1.0}};  // loss, weight
  double label_smoothing = 0.0;  // eps of robust, exo_pair, aot and aot_unpaired
  double discopop_tau = 0.05;
  FDivergence f_divergence = FDivergence::reverse_kl;
  double f_alpha_divergence_coef = 0.5;
};

// Per pair, float32 [B].
struct PairLogps {
  at::Tensor chosen, rejected;                // the trained model's
  at::Tensor ref_chosen, ref_rejected;        // the reference's
  at::Tensor chosen_tokens, rejected_tokens;  // the completions' tokens
  at::Tensor chosen_predicted;                // the chosen completions' tokens that a position predicts
  at::Tensor weights = {};                    // WPO's weight of each pair, no gradient; undefined: 1
  at::Tensor chosen_sft = {};                 // sft's chosen log-likelihoods where LD-DPO weighs `chosen`
};

struct PreferenceLoss {
  at::Tensor loss;  // float32 scalar, differentiable
  // float32 [6], no gradient: rewards/chosen, rewards/rejected, rewards/accuracies,
  // rewards/margins, logps/chosen, logps/rejected
  at::Tensor metrics;
  // float32, no gradient: the objective's own metrics (reference_free_metric_names), or undefined
  at::Tensor extra;
  // KTO's: float32 [6], 1 where the micro-batch has the metric of the same place in `metrics`
  // (Note [KTO loss]); undefined for the others, whose micro-batches have every metric
  at::Tensor counts = {};
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

struct KtoOptions {
  double beta = 0.1;
  double desirable_weight = 1.0;
  double undesirable_weight = 1.0;
  bool kl = true;  // false: apo_zero_unpaired, without the KL term (and without KL rows)
};

// Per row, float32 [B]: logps, ref_logps of the completions, kl_logps, ref_kl_logps of the KL
// rows (undefined without options.kl); `desirable` the rows' labels (host data). PreferenceLoss::metrics are, in order,
// kl, rewards/chosen, rewards/rejected, rewards/margins, logps/chosen, logps/rejected (0 where the micro-batch has
// none: see counts).
PreferenceLoss kto_loss(const at::Tensor& logps,
                        const at::Tensor& ref_logps,
                        const at::Tensor& kl_logps,
                        const at::Tensor& ref_kl_logps,
                        const std::vector<bool>& desirable,
                        const KtoOptions& options);

// The names of PreferenceLoss::extra, in order: ORPO's nll_loss, log_odds_ratio, log_odds_chosen;
// SimPO's nll_loss.
std::vector<std::string> reference_free_metric_names(ReferenceFree objective);

}  // namespace qtrain::engine::train
