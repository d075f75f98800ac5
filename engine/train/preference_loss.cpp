// See preference_loss.h and Note [DPO loss] there.
#include "engine/train/preference_loss.h"

#include <ATen/ATen.h>

namespace qtrain::engine::train {

DpoResult dpo_loss(const PairLogps& p, const DpoOptions& o) {
  const auto chosen_logratios = p.chosen - p.ref_chosen;
  const auto rejected_logratios = p.rejected - p.ref_rejected;
  const auto delta = chosen_logratios - rejected_logratios;
  at::Tensor loss;
  for (const auto& [type, weight] : o.losses) {
    at::Tensor per_pair;
    switch (type) {
      case DpoLoss::sigmoid:
        per_pair = -at::log_sigmoid(o.beta * delta);
        break;
      case DpoLoss::hinge:
        per_pair = at::relu(1 - o.beta * delta);
        break;
      case DpoLoss::ipo: {
        const auto ipo_delta =
            chosen_logratios / p.chosen_tokens.clamp_min(1.0) - rejected_logratios / p.rejected_tokens.clamp_min(1.0);
        per_pair = (ipo_delta - 1 / (2 * o.beta)).pow(2);
        break;
      }
    }
    const auto term = per_pair.mean() * weight;
    loss = loss.defined() ? loss + term : term;
  }
  const auto chosen_rewards = o.beta * chosen_logratios.detach();
  const auto rejected_rewards = o.beta * rejected_logratios.detach();
  const auto metrics = at::stack({chosen_rewards.mean(),
                                  rejected_rewards.mean(),
                                  (chosen_rewards > rejected_rewards).to(at::kFloat).mean(),
                                  (chosen_rewards - rejected_rewards).mean(),
                                  p.chosen.detach().mean(),
                                  p.rejected.detach().mean()});
  return {loss, metrics};
}

}  // namespace qtrain::engine::train
