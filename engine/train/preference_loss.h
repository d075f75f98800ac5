// DPO's losses and metrics as TRL 1.16's DPOTrainer computes them. See Note [DPO loss].
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

struct DpoResult {
  at::Tensor loss;  // float32 scalar, differentiable
  // float32 [6], no gradient: rewards/chosen, rewards/rejected, rewards/accuracies,
  // rewards/margins, logps/chosen, logps/rejected
  at::Tensor metrics;
};

DpoResult dpo_loss(const PairLogps& p, const DpoOptions& options);

}  // namespace qtrain::engine::train
