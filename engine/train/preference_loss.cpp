// See preference_loss.h and Notes [DPO loss] and [Reference-free losses] there.
#include "engine/train/preference_loss.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "ops/host_read.h"

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

PreferenceLoss kto_loss(const at::Tensor& logps,
                        const at::Tensor& ref_logps,
                        const at::Tensor& kl_logps,
                        const at::Tensor& ref_kl_logps,
                        const std::vector<bool>& desirable,
                        const KtoOptions& o) {
  std::vector<int64_t> chosen_rows, rejected_rows;
  for (size_t i = 0; i < desirable.size(); ++i) {
    (desirable[i] ? chosen_rows : rejected_rows).push_back(static_cast<int64_t>(i));
  }
  // The rows of each label: host data, on the device without a host synchronization.
  const auto rows = [&](const std::vector<int64_t>& r) {
    return ops::to_device_async(at::tensor(r, at::TensorOptions().dtype(at::kLong)), logps.device());
  };
  const auto chosen_idx = rows(chosen_rows), rejected_idx = rows(rejected_rows);
  const auto kl = (kl_logps - ref_kl_logps).mean().detach().clamp_min(0);
  const auto logratios = logps - ref_logps;
  const auto chosen_logratios = logratios.index_select(0, chosen_idx);
  const auto rejected_logratios = logratios.index_select(0, rejected_idx);
  const auto chosen_losses = 1 - at::sigmoid(o.beta * (chosen_logratios - kl));
  const auto rejected_losses = 1 - at::sigmoid(o.beta * (kl - rejected_logratios));
  const auto loss = at::cat({o.desirable_weight * chosen_losses, o.undesirable_weight * rejected_losses}).nanmean();
  // Means over the rows of a label, 0 where there are none (their count says so).
  const auto mean_over = [](const at::Tensor& values, size_t count) {
    return values.detach().nansum() / static_cast<double>(std::max<size_t>(1, count));
  };
  const auto chosen_rewards = mean_over(o.beta * chosen_logratios, chosen_rows.size());
  const auto rejected_rewards = mean_over(o.beta * rejected_logratios, rejected_rows.size());
  const auto metrics = at::stack({kl,
                                  chosen_rewards,
                                  rejected_rewards,
                                  chosen_rewards - rejected_rewards,
                                  mean_over(logps.index_select(0, chosen_idx), chosen_rows.size()),
                                  mean_over(logps.index_select(0, rejected_idx), rejected_rows.size())});
  const float has_chosen = chosen_rows.empty() ? 0.0F : 1.0F, has_rejected = rejected_rows.empty() ? 0.0F : 1.0F;
  const auto counts = ops::to_device_async(
      at::tensor({1.0F, has_chosen, has_rejected, has_chosen * has_rejected, has_chosen, has_rejected}),
      logps.device());
  return {loss, metrics, {}, counts};
}

std::vector<std::string> reference_free_metric_names(ReferenceFree objective) {
  if (objective == ReferenceFree::orpo) return {"nll_loss", "log_odds_ratio", "log_odds_chosen"};
  return {"nll_loss"};
}

}  // namespace qtrain::engine::train
