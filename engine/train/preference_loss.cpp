// See preference_loss.h and Notes [DPO loss] and [Reference-free losses] there.
#include "engine/train/preference_loss.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "ops/host_read.h"

namespace qtrain::engine::train {

DpoLoss dpo_loss_named(const std::string& name) {
  static const std::map<std::string, DpoLoss> kNames = {
      {"sigmoid", DpoLoss::sigmoid},
      {"hinge", DpoLoss::hinge},
      {"ipo", DpoLoss::ipo},
      {"sigmoid_norm", DpoLoss::sigmoid_norm},
      {"robust", DpoLoss::robust},
      {"exo_pair", DpoLoss::exo_pair},
      {"nca_pair", DpoLoss::nca_pair},
      {"bco_pair", DpoLoss::bco_pair},
      {"sppo_hard", DpoLoss::sppo_hard},
      {"apo_zero", DpoLoss::apo_zero},
      {"apo_down", DpoLoss::apo_down},
      {"discopop", DpoLoss::discopop},
      {"aot", DpoLoss::aot},
      {"aot_unpaired", DpoLoss::aot_unpaired},
      {"sft", DpoLoss::sft},
  };
  const auto it = kNames.find(name);
  TORCH_CHECK(it != kNames.end(), "no DPO loss named ", name);
  return it->second;
}

FDivergence f_divergence_named(const std::string& name) {
  if (name == "reverse_kl") return FDivergence::reverse_kl;
  if (name == "forward_kl") return FDivergence::forward_kl;
  if (name == "js_divergence") return FDivergence::js_divergence;
  if (name == "alpha_divergence") return FDivergence::alpha_divergence;
  TORCH_CHECK(false, "no f-divergence named ", name);
}

namespace {

// f'(exp(logratios)), the score of a log-ratio under divergence `o.f_divergence` (Note [DPO loss]).
at::Tensor f_divergence_score(const at::Tensor& logratios, const DpoOptions& o) {
  switch (o.f_divergence) {
    case FDivergence::reverse_kl:
      return logratios;
    case FDivergence::forward_kl:
      return 1 - at::exp(-logratios);
    case FDivergence::js_divergence:
      return std::log(2.0) + at::log_sigmoid(logratios);
    case FDivergence::alpha_divergence: {
      const double a = o.f_alpha_divergence_coef;
      if (std::abs(a - 1.0) < 1e-6) return logratios;  // the limit f'(t) = log t
      return (at::exp(((a - 1.0) * logratios).clamp_max(80.0)) - 1.0) * (1.0 / (a - 1.0));
    }
  }
  TORCH_CHECK(false, "unknown f-divergence");
}

// log(1 - e^x) for x < 0, as TRL's ORPOTrainer computes it.
at::Tensor log1mexp(const at::Tensor& x) {
  constexpr double kMinusLn2 = -0.6931471805599453;
  return at::where(x < kMinusLn2, at::log1p(-at::exp(x)), at::log(-at::expm1(x)));
}

// -(1 - eps) log sigmoid(x) - eps log sigmoid(-x): the sigmoid loss with labels smoothed by eps.
at::Tensor smoothed_sigmoid_loss(const at::Tensor& x, double eps) {
  return -at::log_sigmoid(x) * (1 - eps) - at::log_sigmoid(-x) * eps;
}

// The values of the batch dimension in ascending order (aot's).
at::Tensor sorted(const at::Tensor& t) {
  return std::get<0>(at::sort(t, 0));
}

// The per-pair loss of `type` (Note [DPO loss]).
at::Tensor dpo_pair_loss(DpoLoss type, const PairLogps& p, const DpoOptions& o) {
  const double beta = o.beta, eps = o.label_smoothing;
  const auto chosen_logratios = p.chosen - p.ref_chosen;
  const auto rejected_logratios = p.rejected - p.ref_rejected;
  // The losses that take a divergence read the difference of the scores (of the log-ratios
  // themselves under reverse_kl); the others read the log-ratios.
  const auto chosen_scores = f_divergence_score(chosen_logratios, o);
  const auto rejected_scores = f_divergence_score(rejected_logratios, o);
  const auto delta = chosen_scores - rejected_scores;
  const auto per_token_delta = [&] {
    return chosen_scores / p.chosen_tokens.clamp_min(1.0) - rejected_scores / p.rejected_tokens.clamp_min(1.0);
  };
  const auto c = beta * chosen_logratios, r = beta * rejected_logratios;
  switch (type) {
    case DpoLoss::sigmoid:
      return -at::log_sigmoid(beta * delta);
    case DpoLoss::hinge:
      return at::relu(1 - beta * delta);
    case DpoLoss::ipo:
      return (per_token_delta() - 1 / (2 * beta)).pow(2);
    case DpoLoss::sigmoid_norm:
      return -at::log_sigmoid(beta * per_token_delta());
    case DpoLoss::robust:
      return (-(1 - eps) * at::log_sigmoid(beta * delta) + eps * at::log_sigmoid(-beta * delta)) / (1 - 2 * eps);
    case DpoLoss::exo_pair: {
      const auto log_q = at::log_sigmoid(beta * delta), log_not_q = at::log_sigmoid(-beta * delta);
      return at::sigmoid(beta * delta) * (log_q - std::log1p(-eps)) +
             at::sigmoid(-beta * delta) * (log_not_q - std::log(eps));
    }
    case DpoLoss::nca_pair:
      return -at::log_sigmoid(c) - 0.5 * at::log_sigmoid(-c) - 0.5 * at::log_sigmoid(-r);
    case DpoLoss::bco_pair:
      return -at::log_sigmoid(c) - at::log_sigmoid(-r);
    case DpoLoss::sppo_hard:
      return (chosen_logratios - 0.5 / beta).pow(2) + (rejected_logratios + 0.5 / beta).pow(2);
    case DpoLoss::apo_zero:
      return 1 - at::sigmoid(c) + at::sigmoid(r);
    case DpoLoss::apo_down:
      return at::sigmoid(c) + (1 - at::sigmoid(beta * (chosen_logratios - rejected_logratios)));
    case DpoLoss::discopop: {
      const auto x = beta * delta;
      const auto m = at::sigmoid(x / o.discopop_tau);
      return -at::log_sigmoid(x) * (1 - m) + at::exp(-x) * m;
    }
    case DpoLoss::aot:
      return smoothed_sigmoid_loss(beta * (sorted(p.chosen - p.rejected) - sorted(p.ref_chosen - p.ref_rejected)), eps);
    case DpoLoss::aot_unpaired:
      return smoothed_sigmoid_loss(beta * (sorted(chosen_logratios) - sorted(rejected_logratios)), eps);
    case DpoLoss::sft: {
      const auto& chosen = p.chosen_sft.defined() ? p.chosen_sft : p.chosen;
      return (-chosen.sum() / p.chosen_predicted.sum().clamp_min(1.0)).expand_as(chosen);
    }
  }
  TORCH_CHECK(false, "unknown DPO loss");
}

}  // namespace

PreferenceLoss dpo_loss(const PairLogps& p, const DpoOptions& o) {
  at::Tensor loss;
  for (const auto& [type, weight] : o.losses) {
    const auto losses = dpo_pair_loss(type, p, o);
    const auto term = (p.weights.defined() ? losses * p.weights : losses).mean() * weight;
    loss = loss.defined() ? loss + term : term;
  }
  const auto chosen_rewards = o.beta * (p.chosen - p.ref_chosen).detach();
  const auto rejected_rewards = o.beta * (p.rejected - p.ref_rejected).detach();
  const auto metrics = at::stack({chosen_rewards.mean(),
                                  rejected_rewards.mean(),
                                  (chosen_rewards > rejected_rewards).to(at::kFloat).mean(),
                                  (chosen_rewards - rejected_rewards).mean(),
                                  p.chosen.detach().mean(),
                                  p.rejected.detach().mean()});
  return {loss, metrics, {}};
}

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
  const auto kl = o.kl ? (kl_logps - ref_kl_logps).mean().detach().clamp_min(0) : at::zeros({}, logps.options());
  const auto logratios = logps - ref_logps;
  const auto chosen_logratios = logratios.index_select(0, chosen_idx);
  const auto rejected_logratios = logratios.index_select(0, rejected_idx);
  const auto chosen_losses = 1 - at::sigmoid(o.beta * (chosen_logratios - kl));
  const auto rejected_losses =
      o.kl ? 1 - at::sigmoid(o.beta * (kl - rejected_logratios)) : at::sigmoid(o.beta * rejected_logratios);
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
