// See preference_step.h.
#include "engine/train/preference_step.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <tuple>

#include <ATen/ATen.h>

#include "engine/lora/adapters_off.h"
#include "engine/train/data_parallel.h"
#include "engine/train/preference_loss.h"
#include "ops/host_read.h"
#include "ops/nn/cross_entropy.h"

namespace qtrain::engine::train {
namespace {

bool reference_free(const std::string& rl) {
  return rl == "orpo" || rl == "simpo";
}

ReferenceFree reference_free_objective(const std::string& rl) {
  return rl == "orpo" ? ReferenceFree::orpo : ReferenceFree::simpo;
}

// The positions that predict a token where `labels` has one: mask[:, t] = labels[:, t + 1] != -100.
at::Tensor predicting(const at::Tensor& labels) {
  const auto t = labels.size(1);
  return at::cat({labels.narrow(1, 1, t - 1) != ops::kIgnoreIndex, at::zeros({labels.size(0), 1}, at::kBool)}, 1);
}

}  // namespace

std::vector<std::string> preference_metric_names(const std::string& rl) {
  if (rl == "kto") {
    return {"kl",
            "rewards/chosen",
            "rewards/rejected",
            "rewards/margins",
            "logps/chosen",
            "logps/rejected",
            "logits/chosen",
            "logits/rejected",
            "entropy"};
  }
  std::vector<std::string> names = {"rewards/chosen",
                                    "rewards/rejected",
                                    "rewards/accuracies",
                                    "rewards/margins",
                                    "logps/chosen",
                                    "logps/rejected",
                                    "logits/chosen",
                                    "logits/rejected"};
  if (reference_free(rl)) {
    const auto extra = reference_free_metric_names(reference_free_objective(rl));
    names.insert(names.end(), extra.begin(), extra.end());
  } else {
    names.insert(names.end(), {"entropy", "mean_token_accuracy"});
  }
  return names;
}

int64_t preference_metric_slots(const std::string& rl) {
  const auto names = static_cast<int64_t>(preference_metric_names(rl).size());
  return rl == "kto" ? 2 * names : names;
}

std::vector<std::pair<std::string, double>> preference_metrics(const std::string& rl,
                                                               const std::vector<double>& values,
                                                               const std::string& prefix) {
  const auto names = preference_metric_names(rl);
  TORCH_CHECK(static_cast<int64_t>(values.size()) == preference_metric_slots(rl),
              "preference_metrics: ",
              values.size(),
              " values for the ",
              names.size(),
              " metrics of rl ",
              rl);
  std::vector<std::pair<std::string, double>> out;
  for (size_t k = 0; k < names.size(); ++k) {
    if (rl != "kto") {
      out.emplace_back(prefix + names[k], values[k]);
    } else if (const double count = values[names.size() + k]; count > 0) {
      out.emplace_back(prefix + names[k], values[k] / count);
    }
  }
  return out;
}

std::string preference_progress(const std::vector<std::pair<std::string, double>>& metrics, const std::string& prefix) {
  std::string out;
  for (const auto& [name, label, digits] : {std::tuple{"kl", "kl", 4},
                                            std::tuple{"rewards/margins", "margin", 4},
                                            std::tuple{"rewards/accuracies", "acc", 2}}) {
    for (const auto& [key, value] : metrics) {
      if (key != prefix + name) continue;
      char text[48];
      std::snprintf(text, sizeof text, "%.*f", digits, value);
      out += std::string(" | ") + label + " " + text;
    }
  }
  return out;
}

namespace {

// The model's log-likelihoods of a batch's rows as its weights stand, under no gradient, each token
// weighted by `token_weights` (undefined: 1 each).
at::Tensor no_grad_log_probs(TrainingRun& run,
                             const at::Tensor& ids,
                             const at::Tensor& labels,
                             const at::Tensor& token_weights = {}) {
  at::NoGradGuard no_grad;
  auto& scheduler = *run.scheduler;
  return run.lm->sequence_log_probs(scheduler.eval_hidden(scheduler.prepare_eval(), ids), labels, token_weights);
}

// The reference's log-likelihoods of a batch's rows (Note [Preference batch]): the base with the
// adapters off (Note [Adapters off]), or with the weights the run started from (Note [Reference
// adapter]), under no gradient.
at::Tensor reference_log_probs(TrainingRun& run,
                               const at::Tensor& ids,
                               const at::Tensor& labels,
                               const at::Tensor& token_weights = {}) {
  if (run.reference) {
    const ReferenceWeightsOn starting(*run.reference);
    return no_grad_log_probs(run, ids, labels, token_weights);
  }
  const lora::AdaptersOff off;
  return no_grad_log_probs(run, ids, labels, token_weights);
}

// LD-DPO's weight of each token of a micro-batch of pairs (Note [DPO loss]), float32 [2B, T] like
// its labels (host data): a completion's first min(|chosen|, |rejected|) predicted tokens weigh 1,
// the rest `alpha`, everything else 0. |.| counts the tokens a position predicts (from the second).
at::Tensor ld_token_weights(const data::PreferenceBatch& b, double alpha) {
  const int64_t n = b.pairs;
  auto predicted = b.labels != ops::kIgnoreIndex;
  predicted.select(1, 0).fill_(false);  // the first token is predicted by no position
  // Each predicted token's place in its completion (from 1), as TRL's comp_pos, against the pair's
  // shorter completion.
  const auto place = predicted.cumsum(1);
  const auto lengths = predicted.sum(1);
  const auto shared = at::minimum(lengths.narrow(0, 0, n), lengths.narrow(0, n, n)).repeat({2}).unsqueeze(1);
  return at::where(place <= shared, 1.0, alpha).to(at::kFloat) * predicted;
}

// The token weights of a micro-batch of pairs for run config `c`, on `device`: LD-DPO's with
// ld_alpha, else undefined (each token once).
at::Tensor token_weights_of(const data::PreferenceBatch& b, const config::RunConfig& c, const at::Device& device) {
  return c.ld_alpha ? ops::to_device_async(ld_token_weights(b, *c.ld_alpha), device) : at::Tensor();
}

// Rank r's micro-batches of `pairs`, batch_size pairs at a time: batches r, r + world_size, ...;
// `each` gets a batch and the index of its first pair. In the last round a rank without a batch
// calls `missing` instead (a sharded base's pass through the others' forwards).
void for_rank_batches(const std::vector<data::PreferencePair>& pairs,
                      size_t batch_size,
                      const dist::Comm& comm,
                      const std::function<void(const std::vector<data::PreferencePair>&, size_t)>& each,
                      const std::function<void()>& missing) {
  const auto world = static_cast<size_t>(comm.world_size());
  const size_t n = pairs.size(), batches = (n + batch_size - 1) / batch_size;
  for (auto k = static_cast<size_t>(comm.rank()); k < (batches + world - 1) / world * world; k += world) {
    if (k >= batches) {
      missing();
      continue;
    }
    const size_t first = k * batch_size, count = std::min(n, first + batch_size) - first;
    each({pairs.begin() + static_cast<std::ptrdiff_t>(first),
          pairs.begin() + static_cast<std::ptrdiff_t>(first + count)},
         first);
  }
}

// The precomputed reference of a batch's rows (Note [Precomputed reference]): the chosen rows',
// then the rejected rows'.
at::Tensor precomputed(const std::vector<data::PreferencePair>& pairs, const at::Device& device) {
  const auto n = static_cast<int64_t>(pairs.size());
  auto values = at::empty({2 * n}, at::kFloat);
  auto* v = values.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const auto& r = pairs[static_cast<size_t>(i)].reference;
    TORCH_CHECK(r, "a micro-batch mixes pairs with and without a precomputed reference");
    v[i] = (*r)[0];
    v[n + i] = (*r)[1];
  }
  return ops::to_device_async(values, device);
}

// One micro-batch of pairs: its loss (differentiable where `plan` is a training plan), its
// load-balancing loss (undefined without one) and its metrics, float32 on the device.
struct PairBatch {
  at::Tensor loss, aux, metrics;
};

// The trained model's hidden states of `ids`: through `plan` with gradients on a training plan
// (its load-balancing loss into `aux`), else under no gradient.
at::Tensor model_hidden(TrainingRun& run,
                        const schedule::ExecutionPlan& plan,
                        const at::Tensor& ids,
                        const at::Tensor& labels,
                        const config::RunConfig& c,
                        at::Tensor& aux) {
  auto& scheduler = *run.scheduler;
  if (!plan.training()) return scheduler.eval_hidden(plan, ids);
  scheduler.prepare_training(run.policy, c.gradient_checkpointing_every_k);
  const auto h = scheduler.train_hidden(plan, schedule::StepInputs{ids, labels, {}, {}, {}});
  aux = scheduler.aux_loss();
  return h;
}

// A micro-batch of KTO rows (Note [KTO rows], Note [KTO loss]): the reference's log-likelihoods of
// the completion rows and the KL rows, the trained model's of the KL rows under no gradient (as
// TRL's), then its forward of the completion rows through `plan`. Metrics: kto_loss's, then the
// logits means of the desirable and the undesirable completions and the completions' entropy,
// then the counts of each.
PairBatch kto_batch(TrainingRun& run,
                    const schedule::ExecutionPlan& plan,
                    const std::vector<data::PreferencePair>& rows,
                    const config::RunConfig& c) {
  const auto& lm = *run.lm;
  const auto& device = run.options.device;
  const auto b = data::collate_pairs(rows, c.sequence_len, run.pad_id);
  const int64_t n = b.pairs;
  const auto to_device = [&](const at::Tensor& t) { return ops::to_device_async(t, device); };
  const auto ids = to_device(b.input_ids), labels = to_device(b.labels);
  // apo_zero_unpaired has no KL term: neither forward of the KL rows runs.
  const bool kl = c.kto_loss_type == "kto";
  const auto ref = rows.front().reference ? precomputed(rows, device)
                   : kl                   ? reference_log_probs(run, ids, labels)
                                          : reference_log_probs(run, ids.narrow(0, 0, n), labels.narrow(0, 0, n));
  const auto kl_logps = kl ? no_grad_log_probs(run, ids.narrow(0, n, n), labels.narrow(0, n, n)) : at::Tensor();
  PairBatch out;
  const auto row_labels = labels.narrow(0, 0, n);
  const auto h = model_hidden(run, plan, ids.narrow(0, 0, n), row_labels, c, out.aux);
  const auto logps = lm.sequence_log_probs(h, row_labels);
  std::vector<bool> desirable;
  for (const auto& r : rows) desirable.push_back(r.desirable);
  const auto r = kto_loss(logps,
                          ref.narrow(0, 0, n),
                          kl_logps,
                          kl ? ref.narrow(0, n, n) : at::Tensor(),
                          desirable,
                          {c.rl_beta, c.kto_desirable_weight, c.kto_undesirable_weight, kl});
  out.loss = r.loss;
  // TRL's logits/*: the mean logit over the positions that predict a completion token, over the
  // rows of each label; the positions are host data, so are their counts.
  const auto positions = predicting(b.labels.narrow(0, 0, n));
  const auto per_row = positions.sum(1);
  const auto count_of = per_row.accessor<int64_t, 1>();
  auto chosen = at::zeros({n}, at::kFloat);
  auto chosen_of = chosen.accessor<float, 1>();
  double chosen_positions = 0, rejected_positions = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto count = static_cast<double>(count_of[i]);
    if (desirable[static_cast<size_t>(i)]) {
      chosen_of[i] = 1.0F;
      chosen_positions += count;
    } else {
      rejected_positions += count;
    }
  }
  const auto sums = lm.head_sums(h.detach(), positions, {}, {.entropy = true});
  const auto logit_sums = sums.select(1, 0);
  const auto chosen_weight = to_device(chosen);
  // TRL's entropy: over every completion token of the micro-batch (0 without any, and logged so).
  const auto logits = at::stack({(logit_sums * chosen_weight).sum() / std::max(1.0, chosen_positions),
                                 (logit_sums * (1 - chosen_weight)).sum() / std::max(1.0, rejected_positions),
                                 sums.select(1, 1).sum() / std::max(1.0, chosen_positions + rejected_positions)});
  const auto has_logits =
      to_device(at::tensor({chosen_positions > 0 ? 1.0F : 0.0F, rejected_positions > 0 ? 1.0F : 0.0F, 1.0F},
                           at::TensorOptions().dtype(at::kFloat)));
  // A metric the micro-batch lacks adds nothing to its sum (rewards/margins is not 0 there).
  const auto counts = at::cat({r.counts, has_logits});
  out.metrics = at::cat({at::cat({r.metrics, logits}) * counts, counts});
  return out;
}

// The reference's forward (dpo, ipo), the model's through `plan` (with gradients on a training
// plan, else under no gradient), and the objective's loss and metrics.
PairBatch pair_batch(TrainingRun& run,
                     const schedule::ExecutionPlan& plan,
                     const std::vector<data::PreferencePair>& pairs,
                     const config::RunConfig& c) {
  if (c.rl == "kto") return kto_batch(run, plan, pairs, c);
  const auto& lm = *run.lm;
  const auto& device = run.options.device;
  const bool with_reference = !reference_free(c.rl);
  DpoOptions dpo{c.rl_beta,
                 {},
                 c.dpo_label_smoothing,
                 c.discopop_tau,
                 f_divergence_named(c.f_divergence_type),
                 c.f_alpha_divergence_coef};
  for (const auto& [name, weight] : config::dpo_losses(c)) dpo.losses.emplace_back(dpo_loss_named(name), weight);
  const bool sft =
      std::any_of(dpo.losses.begin(), dpo.losses.end(), [](const auto& loss) { return loss.first == DpoLoss::sft; });
  const ReferenceFreeOptions free{
      reference_free_objective(c.rl), c.rl == "orpo" ? c.orpo_alpha : c.rl_beta, c.simpo_gamma, c.cpo_alpha};
  const auto b = data::collate_pairs(pairs, c.sequence_len, run.pad_id);
  // Host data on the device without a host synchronization (Note [Host reads]).
  const auto to_device = [&](const at::Tensor& t) { return ops::to_device_async(t, device); };
  const auto ids = to_device(b.input_ids), labels = to_device(b.labels);
  // LD-DPO's token weights (undefined without ld_alpha): the model's and the reference's alike.
  const auto token_weights = with_reference ? token_weights_of(b, c, device) : at::Tensor();
  at::Tensor ref;
  if (with_reference)
    ref = pairs.front().reference ? precomputed(pairs, device) : reference_log_probs(run, ids, labels, token_weights);
  PairBatch out;
  const auto h = model_hidden(run, plan, ids, labels, c, out.aux);
  const auto logps = lm.sequence_log_probs(h, labels, token_weights);
  const int64_t n = b.pairs;
  // The completion's tokens (IPO's length), and those the positions predict (the averages').
  const auto completion = to_device((b.labels != ops::kIgnoreIndex).sum(1).to(at::kFloat));
  const auto predicted = to_device(predicting(b.labels).sum(1).to(at::kFloat));
  // The positions whose logits TRL averages: DPO's predict a completion token, ORPO's are every
  // token of the row but its last, CPO's (SimPO's) every token (TRL's also take the padding's).
  const auto logit_positions = with_reference   ? predicting(b.labels)
                               : c.rl == "orpo" ? predicting(b.row_labels)
                                                : b.row_labels != ops::kIgnoreIndex;
  // ORPO and SimPO log neither entropy nor token accuracy.
  const bool wpo = with_reference && c.dpo_use_weighting;
  const auto sums = lm.head_sums(
      h.detach(), logit_positions, with_reference ? b.labels : at::Tensor(), {.entropy = with_reference, .wpo = wpo});
  PreferenceLoss r;
  if (with_reference) {
    PairLogps p{logps.narrow(0, 0, n),
                logps.narrow(0, n, n),
                ref.narrow(0, 0, n),
                ref.narrow(0, n, n),
                completion.narrow(0, 0, n),
                completion.narrow(0, n, n),
                predicted.narrow(0, 0, n)};
    if (wpo) {
      // WPO: exp of each completion's mean alignment over its predicted tokens, a pair's product.
      const auto w = at::exp(sums.select(1, 3) / predicted.clamp_min(1));
      p.weights = w.narrow(0, 0, n) * w.narrow(0, n, n);
    }
    // sft reads the chosen completions' log-likelihoods unweighted (TRL's per-token sum).
    if (sft && token_weights.defined()) p.chosen_sft = lm.sequence_log_probs(h.narrow(0, 0, n), labels.narrow(0, 0, n));
    r = dpo_loss(p, dpo);
  } else {
    const auto avg = logps / predicted.clamp_min(1);
    at::Tensor nll;
    if (c.rl == "orpo") {
      // Over the chosen rows' prompts and completions.
      const auto chosen_rows = b.row_labels.narrow(0, 0, n);
      const auto tokens = to_device(predicting(chosen_rows).sum().to(at::kFloat));
      nll = -lm.sequence_log_probs(h.narrow(0, 0, n), to_device(chosen_rows)).sum() / tokens;
    } else {
      // Over the chosen completions; CPOTrainer computes none where cpo_alpha is 0.
      nll = free.cpo_alpha == 0 ? at::zeros({}, logps.options())
                                : -logps.narrow(0, 0, n).sum() / predicted.narrow(0, 0, n).sum();
    }
    r = reference_free_loss(avg.narrow(0, 0, n), avg.narrow(0, n, n), nll, free);
  }
  out.loss = r.loss;
  const auto positions = to_device(logit_positions.sum(1).to(at::kFloat));
  // The sum of column `k` of `sums` over `rows` rows from `first`, per position (0 without any).
  auto mean_of = [&](int64_t k, int64_t first, int64_t rows) {
    const auto count = positions.narrow(0, first, rows).sum();
    return at::where(
        count > 0, sums.select(1, k).narrow(0, first, rows).sum() / count.clamp_min(1), at::zeros_like(count));
  };
  std::vector<at::Tensor> metrics = {r.metrics, at::stack({mean_of(0, 0, n), mean_of(0, n, n)})};
  if (r.extra.defined()) metrics.push_back(r.extra);
  // DPO's entropy over every completion token, its token accuracy over the chosen ones.
  if (with_reference) metrics.push_back(at::stack({mean_of(1, 0, 2 * n), mean_of(2, 0, n)}));
  out.metrics = at::cat(metrics);
  return out;
}

}  // namespace

StepSums preference_forward_backward(TrainingRun& run,
                                     const schedule::ExecutionPlan& plan,
                                     const std::vector<std::vector<data::PreferencePair>>& batches,
                                     const config::RunConfig& c,
                                     double aux_coef) {
  const double share = 1.0 / static_cast<double>(run.counts.step_batches);
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(run.options.device);
  StepSums sums{at::zeros({}, f64), at::zeros({}, f64), at::zeros({preference_metric_slots(c.rl)}, f64)};
  for (const auto& pairs : batches) {
    const auto b = pair_batch(run, plan, pairs, c);
    auto objective = b.loss;
    if (b.aux.defined()) {
      objective = objective + aux_coef * b.aux;
      sums.aux = sums.aux + b.aux.detach().to(at::kDouble);
    }
    (objective * share).backward();
    sums.recomputed += run.scheduler->stats().layers_recomputed;
    sums.loss = sums.loss + objective.detach().to(at::kDouble) * share;
    sums.metrics = sums.metrics + b.metrics.to(at::kDouble);
  }
  return sums;
}

void precompute_reference(TrainingRun& run, const config::RunConfig& c, dist::Comm& comm, std::FILE* out) {
  const auto batch_size =
      static_cast<size_t>(c.precompute_ref_batch_size > 0 ? c.precompute_ref_batch_size : c.micro_batch_size);
  const auto& device = run.options.device;
  const auto world = static_cast<size_t>(comm.world_size());
  const auto t0 = std::chrono::steady_clock::now();
  const size_t total = run.pairs->pairs().size() + run.eval_pairs.size();
  size_t before = 0;  // the pairs of the splits done
  for (auto* pairs : {&run.pairs->pairs(), &run.eval_pairs}) {
    const size_t n = pairs->size();
    if (n == 0) continue;
    // Batch k's chosen rows' values, then its rejected rows', from 2 * its first pair on; rank r
    // computes batches r, r + world, ..., and the sum over the ranks fills in the others'.
    auto values = at::zeros({static_cast<int64_t>(2 * n)}, at::TensorOptions().dtype(at::kFloat).device(device));
    size_t calls = 0;
    for_rank_batches(
        *pairs,
        batch_size,
        comm,
        [&](const std::vector<data::PreferencePair>& batch, size_t first) {
          const auto b = data::collate_pairs(batch, c.sequence_len, run.pad_id);
          values.narrow(0, static_cast<int64_t>(2 * first), static_cast<int64_t>(2 * batch.size()))
              .copy_(reference_log_probs(run,
                                         ops::to_device_async(b.input_ids, device),
                                         ops::to_device_async(b.labels, device),
                                         token_weights_of(b, c, device)));
          // Rank 0 prints (RankConsole); its batch opens each round of world_size batches.
          const size_t done = std::min(n, first + world * batch_size);
          if (done == n || ++calls % 64 == 0) {
            std::fprintf(out,
                         "precompute_ref_log_probs: %zu/%zu %s (%.1f s)\n",
                         before + done,
                         total,
                         c.rl == "kto" ? "rows" : "pairs",
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            std::fflush(out);
          }
        },
        [&] {
          if (run.sharded) run.scheduler->skip_eval(run.scheduler->prepare_eval());
        });
    if (world > 1) comm.allreduce_sum(values, "gathering the precomputed reference log-probabilities");
    const auto host = ops::read_to_host(values, "precompute: reference log-probabilities");
    const auto* v = host.const_data_ptr<float>();
    for (size_t first = 0; first < n; first += batch_size) {
      const size_t count = std::min(n, first + batch_size) - first;
      for (size_t i = 0; i < count; ++i) {
        (*pairs)[first + i].reference = std::array<float, 2>{v[2 * first + i], v[2 * first + count + i]};
      }
    }
    before += n;
  }
}

PairEvaluation evaluate_pairs(TrainingRun& run, const config::RunConfig& c, dist::Comm& comm) {
  at::NoGradGuard no_grad;
  const auto plan = run.scheduler->prepare_eval();
  const auto& pairs = run.eval_pairs;
  const int64_t slots = preference_metric_slots(c.rl);
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(run.options.device);
  // [loss weighted by the batch's pairs, pairs, batches, metrics...]
  auto sums = at::zeros({3 + slots}, f64);
  for_rank_batches(
      pairs,
      static_cast<size_t>(c.micro_batch_size),
      comm,
      [&](const std::vector<data::PreferencePair>& batch, size_t) {
        const auto b = pair_batch(run, plan, batch, c);
        const auto count = static_cast<double>(batch.size());
        sums = sums + at::cat({at::stack({b.loss.to(at::kDouble) * count}),
                               at::tensor({count, 1.0}, f64),
                               b.metrics.to(at::kDouble)});
      },
      [&] {
        // A sharded base gathers every layer on every rank: pass through the others' forwards
        // (the model's, and the reference's unless it was precomputed; KTO runs on one process).
        if (!run.sharded) return;
        const bool reference = !reference_free(c.rl) && !c.precompute_ref_log_probs;
        for (int k = 0; k < (reference ? 2 : 1); ++k) run.scheduler->skip_eval(plan);
      });
  const auto local = ops::read_to_host(sums, "eval: held-out pairs").contiguous();
  const std::vector<double> host(local.data_ptr<double>(), local.data_ptr<double>() + local.numel());
  const auto total = sum_over_ranks(comm, host, "summing the evaluation of held-out pairs");
  PairEvaluation out;
  out.loss = total[1] > 0 ? total[0] / total[1] : std::nan("");
  std::vector<double> means;
  for (int64_t k = 0; k < slots; ++k) {
    means.push_back(total[2] > 0 ? total[3 + static_cast<size_t>(k)] / total[2] : std::nan(""));
  }
  out.metrics = preference_metrics(c.rl, means, "eval_");
  return out;
}

}  // namespace qtrain::engine::train
