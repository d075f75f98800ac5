// See preference_loss.h and Notes [DPO loss] and [Reference-free losses] there.
#include "engine/train/preference_loss.h"

#include <ATen/ATen.h>

namespace qtrain::engine::train {

PreferenceLoss dpo_loss(const PairLogps& p, const DpoOptions& o) {
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
  return {loss, metrics, {}};
}

namespace {

// log(1 - e^x) for x < 0, as TRL's ORPOTrainer computes it.
at::Tensor log1mexp(const at::Tensor& x) {
  constexpr double kMinusLn2 = -0.6931471805599453;
  return at::where(x < kMinusLn2, at::log1p(-at::exp(x)), at::log(-at::expm1(x)));
}

}  // namespace

PreferenceLoss reference_free_loss(const at::Tensor& avg_chosen,
                                   const at::Tensor& avg_rejected,
                                   const at::Tensor& nll,
                                   const ReferenceFreeOptions& o) {
  at::Tensor loss, extra;
  if (o.objective == ReferenceFree::orpo) {
    const auto log_odds = (avg_chosen - avg_rejected) - (log1mexp(avg_chosen) - log1mexp(avg_rejected));
    const auto ratio = at::log_sigmoid(log_odds);
    loss = nll - (o.beta * ratio).mean();
    extra = at::stack({nll.detach(), ratio.detach().mean(), log_odds.detach().mean()});
  } else {
    const auto logits = (avg_chosen - avg_rejected) - o.simpo_gamma / o.beta;
    loss = (-at::log_sigmoid(o.beta * logits)).mean() + o.cpo_alpha * nll;
    extra = nll.detach().reshape({1});
  }
  const auto chosen_rewards = o.beta * avg_chosen.detach();
  const auto rejected_rewards = o.beta * avg_rejected.detach();
  const auto metrics = at::stack({chosen_rewards.mean(),
                                  rejected_rewards.mean(),
                                  (chosen_rewards > rejected_rewards).to(at::kFloat).mean(),
                                  (chosen_rewards - rejected_rewards).mean(),
                                  avg_chosen.detach().mean(),
                                  avg_rejected.detach().mean()});
  return {loss, metrics, extra};
}

std::vector<std::string> reference_free_metric_names(ReferenceFree objective) {
  if (objective == ReferenceFree::orpo) return {"nll_loss", "log_odds_ratio", "log_odds_chosen"};
  return {"nll_loss"};
}

}  // namespace qtrain::engine::train
