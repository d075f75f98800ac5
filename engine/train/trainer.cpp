// See trainer.h and Note [Training phases].
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include "engine/data/run_tokenizer_files.h"
#include "engine/dist/comm.h"
#include "engine/dist/dist_env.h"
#include "engine/io/companion_files.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/lora_attach.h"
#include "engine/model/saved_modules.h"
#include "engine/schedule/rng_state.h"
#include "engine/train/clip_grad.h"
#include "engine/train/data_parallel.h"
#include "engine/train/interrupt.h"
#include "engine/train/loss_watchdog.h"
#include "engine/train/memory_stats.h"
#include "engine/train/metrics_log.h"
#include "engine/train/model_setup.h"
#include "engine/train/output_dir.h"
#include "engine/train/preference_step.h"
#include "engine/train/progress_line.h"
#include "engine/train/training_run.h"
#include "ops/host_read.h"

namespace qtrain::engine::train {
namespace fs = std::filesystem;
namespace {

// Steps in a row whose loss or gradient is not finite before the run stops.
constexpr int64_t kMaxConsecutiveNonFinite = 10;

// A batch on the compute device. On CUDA the copies go through pinned memory and do not block
// the host, so the next batch is assembled while this one is copied. Unpacked rows drop their
// segment and position ids: one right-padded sample per row needs no mask and positions
// 0..T-1 (See Note [Packed batch layout]), and without a mask attention runs the flash kernel.
schedule::StepInputs step_inputs(const data::Batch& b, const at::Device& device, bool packed) {
  auto to = [&](const at::Tensor& t) {
    if (!t.defined() || !device.is_cuda()) return t;
    return t.pin_memory().to(device, /*non_blocking=*/true);
  };
  // The padding mask only matters to the load-balancing loss, which leaves padding out.
  const auto mask = to(b.segment_ids >= 0);
  const int64_t predicted = model::predicted_token_count(b.labels);  // on the host: Note [Host reads]
  if (!packed) return {to(b.input_ids), to(b.labels), {}, {}, mask, predicted};
  return {to(b.input_ids), to(b.labels), to(b.position_ids), to(b.segment_ids), mask, predicted};
}

// Note [Load-balancing loss in a step]
// The HF Trainer calls the model once per micro-batch; Qwen3MoeForCausalLM and MixtralForCausalLM
// return CE + router_aux_loss_coef * aux, where CE is divided by the step's token count
// (num_items_in_batch, summed over ranks) and aux is that micro-batch's own (See Note
// [Load-balancing loss]). The Trainer does not divide that loss by gradient_accumulation_steps
// (the model took num_items_in_batch), and with several ranks multiplies it by their number before
// DDP averages the gradients. So each micro-batch on each rank adds coef * its aux to what the
// step differentiates, and the step's loss as the Trainer logs it is the token-weighted CE plus
// coef times the sum of the aux of all micro-batches of all ranks. qtrain does the same; the
// aux_loss it logs is the mean aux per micro-batch (about top_k when the routing is balanced).
// Evaluation (eval_loss) is the cross-entropy alone.

// Rank r evaluates batches r, r + world_size, ...; the sums are summed over the ranks. With a
// sharded base every rank takes part in every layer's gather, so in the last round a rank without
// a batch passes through the layers without computing (`lockstep`).
double evaluate(schedule::LayerScheduler& scheduler,
                const std::vector<data::Sample>& samples,
                const config::RunConfig& c,
                int64_t pad_id,
                const at::Device& device,
                dist::Comm& comm,
                bool lockstep) {
  data::DataLoader loader(samples, c.micro_batch_size, c.sequence_len, /*packing=*/false, c.seed, pad_id);
  const auto plan = scheduler.prepare_eval();
  const int64_t n = loader.batches_per_epoch(), world = comm.world_size();
  double sum = 0;
  int64_t tokens = 0;
  for (int64_t i = 0; i < (n + world - 1) / world * world; ++i) {
    const bool mine = i % world == comm.rank();
    if (i >= n) {
      if (mine && lockstep) scheduler.skip_eval(plan);
      continue;
    }
    const auto batch = loader.next();
    if (!mine) continue;
    const auto r = scheduler.eval_loss(plan, step_inputs(batch, device, /*packed=*/false));
    sum += ops::read_scalar<double>(r.loss_sum, "eval: loss");
    tokens += r.tokens;
  }
  const auto total = sum_over_ranks(comm, {sum, static_cast<double>(tokens)}, "summing the evaluation loss");
  return total[1] > 0 ? total[0] / total[1] : std::nan("");
}

// Note [Training phases]
// `qtrain train` sets a run up once (training_run.h: memory plan, model and adapters, data, step
// counts, optimizer, layer scheduler, resume), then takes each optimizer step through the same
// phases, each a function below:
//   prepare batch      this rank's micro-batches of the step (next_step_batches);
//   forward and loss   the objective, differentiated micro-batch by micro-batch: the
//                      token-weighted cross-entropy and, on MoE models, the load-balancing loss
//                      (forward_backward; Note [Load-balancing loss in a step]);
//   optimizer step     gradients summed over the ranks, the step's one host read (loss and
//                      finiteness), a non-finite step skipped, clipping, the update (apply_step);
//   log                the window's progress line, metrics.jsonl and TensorBoard (LogWindow);
//   evaluate, save     on their intervals, and a checkpoint when a signal stops the run.
// Preference tuning (rl) takes pairs in prepare batch and has its own forward and loss
// (preference_step.h: the reference, DPO's loss, TRL's metrics); it shares the rest.

// This rank's micro-batches of one optimizer step, and the step's token counts over all ranks.
struct StepBatches {
  std::vector<data::Batch> mine;
  std::vector<std::vector<data::PreferencePair>> mine_pairs;  // preference tuning's, in place of `mine`
  int64_t predicted_tokens = 0;  // the tokens the step's loss predicts, every rank's batches
  int64_t real_tokens = 0;       // tokens that are not padding, for tokens/s
};

StepBatches next_step_batches(TrainingRun& run, int64_t sequence_len) {
  StepBatches out;
  const auto& share = run.counts.share;
  for (int64_t i = 0; i < run.counts.step_batches; ++i) {
    if (run.pairs) {
      auto pairs = run.pairs->next();
      for (const auto& p : pairs) {
        for (const auto* completion : {&p.chosen, &p.rejected}) {
          out.real_tokens += std::min<int64_t>(sequence_len, p.prompt.size() + completion->size());
        }
      }
      if (i >= share.first && i < share.first + share.count) out.mine_pairs.push_back(std::move(pairs));
      continue;
    }
    auto b = run.loader->next();
    out.predicted_tokens += b.tokens();
    out.real_tokens += (b.segment_ids >= 0).sum().item<int64_t>();
    if (i >= share.first && i < share.first + share.count) out.mine.push_back(std::move(b));
  }
  return out;
}

// Token-weighted mean over the whole step (transformers' num_items_in_batch): each micro-batch's
// summed loss is divided by the step's predicted-token count. The load-balancing loss is each
// micro-batch's own, added with its coefficient unscaled, as the HF Trainer adds the model's (See
// Note [Load-balancing loss in a step]). The losses add up on the device, in float64 as the host
// added them before (Note [Host reads]).
StepSums forward_backward(TrainingRun& run,
                          const schedule::ExecutionPlan& plan,
                          const StepBatches& batches,
                          const config::RunConfig& c,
                          double aux_coef) {
  const auto zero = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(run.options.device));
  StepSums sums{zero, zero};
  auto& scheduler = *run.scheduler;
  for (const auto& b : batches.mine) {
    const auto r = scheduler.train_forward(plan, step_inputs(b, run.options.device, c.sample_packing));
    auto objective = r.loss_sum / static_cast<double>(std::max<int64_t>(1, batches.predicted_tokens));
    if (const auto& aux = scheduler.aux_loss(); aux.defined()) {
      objective = objective + aux_coef * aux;
      sums.aux = sums.aux + aux.detach().to(at::kDouble);
    }
    objective.backward();
    sums.recomputed += scheduler.stats().layers_recomputed;
    sums.loss = sums.loss + r.loss_sum.detach().to(at::kDouble);
  }
  return sums;
}

// A step's result as every rank agrees on it.
struct StepOutcome {
  double loss = 0;              // the step's mean token loss plus its load-balancing term, as the Trainer logs it
  double aux_sum = 0;           // the load-balancing losses of all micro-batches of all ranks
  bool applied = true;          // false: skipped, its loss or a gradient was not finite
  double grad_norm = 0;         // before clipping, where applied
  bool stop = false;            // a rank was asked to stop by a signal
  std::vector<double> metrics;  // preference tuning's (preference_metric_names), means over the micro-batches
};

// One decision for every rank: the summed gradients and loss, and a stop if any rank was asked
// to; then the update, or the skip of a non-finite step (the optimizer untouched).
StepOutcome apply_step(TrainingRun& run,
                       const StepSums& sums,
                       const StepBatches& batches,
                       const config::RunConfig& c,
                       double aux_coef,
                       dist::Comm& comm,
                       const InterruptGuard& interrupt) {
  const auto& params = run.params;
  const std::string step_name = "step " + std::to_string(run.state.global_step + 1);
  sum_gradients(comm, params, "summing the gradients of " + step_name);
  // The step's one read before clipping: its loss, its load-balancing loss, whether every
  // (summed) gradient is finite, and a preference objective's metrics.
  auto values = at::stack({sums.loss, sums.aux, grads_finite(params).to(sums.loss.device(), at::kDouble)});
  if (sums.metrics.defined()) values = at::cat({values, sums.metrics});
  const auto read = ops::read_to_host(values, "step: loss and finite gradients");
  const bool finite_grads = read[2].item<double>() != 0;
  std::vector<double> local = {read[0].item<double>(), interrupt.received() != 0 ? 1.0 : 0.0, read[1].item<double>()};
  for (int64_t i = 3; i < read.numel(); ++i) local.push_back(read[i].item<double>());
  const auto summed = sum_over_ranks(comm, local, "summing the loss of " + step_name);
  StepOutcome out;
  out.stop = summed[1] > 0;
  out.aux_sum = summed[2];
  // A preference step's loss is already the ranks' shares of its mean (preference_step.h).
  out.loss = run.pairs ? summed[0]
                       : summed[0] / static_cast<double>(std::max<int64_t>(1, batches.predicted_tokens)) +
                             aux_coef * summed[2];
  for (size_t i = 3; i < summed.size(); ++i) {
    out.metrics.push_back(summed[i] / static_cast<double>(run.counts.step_batches));
  }
  out.applied = std::isfinite(out.loss) && finite_grads;
  if (out.applied) {
    out.grad_norm = clip_grad_norm(params, c.max_grad_norm);
    run.optimizer->step(run.lr_schedule.lr_at(run.state.global_step));
  }
  run.optimizer->zero_grad();
  return out;
}

// The steps since the last progress line: what the line and metrics.jsonl report.
struct LogWindow {
  int64_t steps = 0;  // applied ones
  int64_t tokens = 0;
  double loss = 0, aux = 0, comm_seconds = 0;
  std::vector<double> metrics;  // preference tuning's, summed over the applied steps
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int64_t copied_logged = 0;  // offload bytes counted at the last line
  int64_t step_logged = 0;    // the step of the last line
};

// The progress line and metrics row of the window that ends at this step, then a new window.
// Returns the window's mean loss.
double log_window(LogWindow& w,
                  TrainingRun& run,
                  const config::RunConfig& c,
                  std::optional<MetricsLog>& metrics,
                  std::chrono::steady_clock::time_point t_start,
                  int64_t recomputed,
                  double grad_norm,
                  bool aux_on,
                  std::FILE* out) {
  const auto& state = run.state;
  const int64_t total = run.counts.total;
  const auto& device = run.options.device;
  const auto now = std::chrono::steady_clock::now();
  const double window_s = std::chrono::duration<double>(now - w.start).count();
  const double elapsed = std::chrono::duration<double>(now - t_start).count();
  const double epoch = static_cast<double>(state.global_step) / static_cast<double>(run.counts.steps_per_epoch);
  const double loss = w.steps > 0 ? w.loss / w.steps : std::nan("");
  const double lr = run.lr_schedule.lr_at(state.global_step);  // the next step's, as the Trainer logs it
  const double tps = window_s > 0 ? static_cast<double>(w.tokens) / window_s : 0.0;
  const int64_t peak = peak_memory_bytes(device);
  // Host-to-device bytes of offloaded layers per step, over the steps since the last line (a
  // sharded base's gathers are in comm_seconds).
  const int64_t copied = run.streamed && !run.sharded ? run.streamed->stats().ring.copied_bytes : 0;
  const int64_t steps_in_window = std::max<int64_t>(1, state.global_step - w.step_logged);
  const int64_t copied_per_step = (copied - w.copied_logged) / steps_in_window;
  const double aux = w.steps > 0 ? w.aux / w.steps : std::nan("");
  if (metrics) {
    nlohmann::json row = {{"step", state.global_step},
                          {"epoch", epoch},
                          {"loss", loss},
                          {"learning_rate", lr},
                          {"grad_norm", grad_norm},
                          {"tokens_per_second", tps},
                          {"peak_memory_bytes", peak},
                          {"recomputed_layers", recomputed},
                          {"offload_bytes_per_step", copied_per_step},
                          {"comm_seconds", w.comm_seconds / static_cast<double>(steps_in_window)},
                          {"skipped_steps", state.skipped_steps}};
    if (aux_on) row["aux_loss"] = aux;
    const auto names = w.metrics.empty() ? std::vector<std::string>() : preference_metric_names(c.rl);
    for (size_t i = 0; i < w.metrics.size(); ++i) {
      row[names.at(i)] = w.steps > 0 ? w.metrics[i] / w.steps : std::nan("");
    }
    // What the plan counted for the same peak (the allocator's allocated bytes), on CUDA, and the
    // peak's parts measured beside the plan's: what was allocated when the last forward began, what
    // that forward kept for backward, and the rest of the peak (the largest transient).
    if (run.device_plan.memory && device.is_cuda()) {
      const auto& plan = *run.device_plan.memory;
      const auto& s = run.scheduler->stats();
      row["planned_peak_bytes"] = plan.allocated_bytes;
      row["resident_bytes"] = s.resident_bytes;
      row["planned_resident_bytes"] = plan.allocated_bytes - plan.activation_bytes - plan.transient_bytes;
      row["activation_bytes"] = s.activation_bytes;
      row["planned_activation_bytes"] = plan.activation_bytes;
      row["transient_bytes"] = peak - s.resident_bytes - s.activation_bytes;
      row["planned_transient_bytes"] = plan.transient_bytes;
    }
    metrics->log(row);
  }
  const double per_step = elapsed / static_cast<double>(std::max<int64_t>(1, state.global_step));
  char aux_text[96] = "";
  if (aux_on) std::snprintf(aux_text, sizeof aux_text, " (aux %.4f)", aux);
  if (!w.metrics.empty() && w.steps > 0) {
    // rewards/margins and rewards/accuracies (Note [DPO loss]).
    std::snprintf(aux_text,
                  sizeof aux_text,
                  " | margin %.4f | acc %.2f",
                  w.metrics[3] / static_cast<double>(w.steps),
                  w.metrics[2] / static_cast<double>(w.steps));
  }
  std::fprintf(
      out,
      "step %lld/%lld | epoch %.2f | loss %.4f%s | lr %.3e | grad %.3f | %.0f tok/s | %s < %s | peak %.2f GiB\n",
      static_cast<long long>(state.global_step),
      static_cast<long long>(total),
      epoch,
      loss,
      aux_text,
      lr,
      grad_norm,
      tps,
      clock_text(elapsed).c_str(),
      clock_text(per_step * static_cast<double>(total - state.global_step)).c_str(),
      static_cast<double>(peak) / (1 << 30));
  std::fflush(out);
  w = LogWindow{.start = now, .copied_logged = copied, .step_logged = state.global_step};
  reset_peak_memory(device);
  return loss;
}

// A checkpoint of the run at its step: rank 0 writes it with every rank's generator states.
void save_checkpoint_of(
    TrainingRun& run, const config::RunConfig& c, const std::string& config_yaml, dist::Comm& comm, std::FILE* out) {
  auto& state = run.state;
  const auto& device = run.options.device;
  const std::string name = "checkpoint-" + std::to_string(state.global_step);
  state.data = data_position(run);
  state.world_size = comm.world_size();
  state.rng_cpu = gather_states(comm, schedule::rng_state(at::kCPU), "gathering generator states for " + name);
  state.rng_cuda.clear();
  if (device.is_cuda()) {
    state.rng_cuda = gather_states(comm, schedule::rng_state(device), "gathering generator states for " + name);
  }
  if (comm.lead()) {
    const auto dir = save_checkpoint(c.output_dir,
                                     state,
                                     *run.optimizer,
                                     run.lora,
                                     model::lora_adapters(*run.lm),
                                     model::saved_modules(*run.lm),
                                     c.base_model.string(),
                                     config_yaml);
    prune_checkpoints(c.output_dir, c.save_total_limit);
    std::fprintf(out, "checkpoint: %s\n", dir.c_str());
  }
  comm.barrier("waiting for rank 0 to write " + name);
}

// The trained adapter (and, with new tokens, the tokenizer that made their ids) in output_dir.
void save_adapter(const TrainingRun& run, const config::RunConfig& c, dist::Comm& comm, std::FILE* out) {
  comm.barrier("waiting for every rank to finish training");
  if (comm.lead()) {
    io::save_peft_adapter(c.output_dir,
                          run.lora,
                          model::lora_adapters(*run.lm),
                          c.base_model.string(),
                          at::kFloat,
                          io::AdapterFolder::shared,
                          model::saved_modules(*run.lm));
    std::fprintf(out, "adapter: %s (PEFT: adapter_config.json, adapter_model.safetensors)\n", c.output_dir.c_str());
    // With new tokens the adapter means nothing without the tokenizer that made their ids: it
    // goes beside the adapter, as axolotl saves it.
    if (!run.vocabulary.added.empty()) {
      io::copy_companion_files(c.base_model, c.output_dir, io::Companions::tokenizer);
      data::write_run_tokens(c.output_dir, c, *run.vocabulary.tokenizer);
      std::fprintf(out, "tokenizer: %s, with the run's special_tokens and tokens\n", c.output_dir.c_str());
    }
  }
  comm.barrier("waiting for rank 0 to write the adapter");
}

TrainResult train_rank(const config::RunConfig& c, dist::Comm& comm, const at::Device& device) {
  const auto t_start = std::chrono::steady_clock::now();
  const RankConsole console(comm);
  std::FILE* out = console.get();
  // Only rank 0 checks output_dir (and with overwrite_output_dir clears it), and tells the others
  // which checkpoint to resume from: a rank that looked after it would find rank 0's new files
  // (metrics.jsonl, run_config.yaml) and take them for another run's, or delete them.
  fs::path resume;
  if (comm.lead()) resume = prepare_output_dir(c, out);
  resume = text_from_rank0(comm, resume.string(), "waiting for rank 0 to check output_dir");
  const std::string config_yaml = config::to_yaml(c);
  if (comm.lead()) {
    fs::create_directories(c.output_dir);
    std::ofstream(c.output_dir / "run_config.yaml") << config_yaml;
  }
  at::manual_seed(c.seed);
  c10::OptionalDeviceGuard device_guard;
  if (device.is_cuda()) device_guard.reset_device(device);
  auto run = set_up_training(c, comm, device, resume, out);
  auto& state = run.state;
  const int64_t total = run.counts.total, eval_steps = run.counts.eval_steps, save_steps = run.counts.save_steps;

  std::optional<MetricsLog> metrics;  // rank 0's
  if (comm.lead()) metrics.emplace(c.output_dir, c.use_tensorboard);
  InterruptGuard interrupt;
  TrainResult result;
  result.output_dir = c.output_dir;
  result.lead = comm.lead();
  const auto plan = run.scheduler->prepare_training(run.policy, c.gradient_checkpointing_every_k);
  // See Note [Load-balancing loss] (engine/model/load_balancing.h).
  const auto& moe = run.lm->config().moe;
  const bool aux_on = moe && moe->output_router_logits;
  const double aux_coef = aux_on ? moe->router_aux_loss_coef : 0.0;
  int64_t consecutive_bad = 0;
  double grad_norm = 0;  // the last applied step's
  LogWindow window{.step_logged = state.global_step};
  LossWatchdog watchdog(c.loss_watchdog_threshold, c.loss_watchdog_patience);
  std::fflush(out);
  // The first window's peak is the steps', not the load's or the bandwidth probe's.
  reset_peak_memory(device);
  while (state.global_step < total) {
    const auto batches = next_step_batches(run, c.sequence_len);
    window.tokens += batches.real_tokens;
    StepSums sums;
    try {
      sums = run.pairs ? preference_forward_backward(run, plan, batches.mine_pairs, c, aux_coef)
                       : forward_backward(run, plan, batches, c, aux_coef);
    } catch (const c10::OutOfMemoryError& e) {
      TORCH_CHECK(false, out_of_memory_report(run.device_plan, c, state.global_step + 1, e.what_without_backtrace()));
    }
    const double comm_before = comm.seconds();
    const auto step = apply_step(run, sums, batches, c, aux_coef, comm, interrupt);
    window.comm_seconds += comm.seconds() - comm_before;
    if (!step.applied) {
      ++state.skipped_steps;
      TORCH_CHECK(++consecutive_bad < kMaxConsecutiveNonFinite,
                  "stopping: ",
                  consecutive_bad,
                  " steps in a row had a non-finite loss or gradient (last loss ",
                  step.loss,
                  ", step ",
                  state.global_step + 1,
                  "). Lower learning_rate, check the data for empty or broken rows, or "
                  "train in bf16/float32 rather than fp16. The last checkpoint in ",
                  c.output_dir.string(),
                  " is intact.");
      std::fprintf(
          out, "step %lld: non-finite loss or gradient, step skipped\n", static_cast<long long>(state.global_step + 1));
    } else {
      consecutive_bad = 0;
      grad_norm = step.grad_norm;
      window.loss += step.loss;
      window.aux += step.aux_sum / static_cast<double>(run.counts.step_batches);
      window.metrics.resize(step.metrics.size());
      for (size_t i = 0; i < step.metrics.size(); ++i) window.metrics[i] += step.metrics[i];
      ++window.steps;
    }
    ++state.global_step;
    const bool watchdog_stop = watchdog.step_end();
    if (state.global_step % c.logging_steps == 0 || state.global_step == total) {
      result.last_loss = log_window(window, run, c, metrics, t_start, sums.recomputed, grad_norm, aux_on, out);
      watchdog.logged_loss(result.last_loss);
    }
    if (eval_steps > 0 && (state.global_step % eval_steps == 0 || state.global_step == total)) {
      // Preference tuning evaluates its held-out pairs by its objective (preference_step.h).
      const auto pairs = run.pairs ? std::optional(evaluate_pairs(run, c, comm)) : std::nullopt;
      const double eval_loss =
          pairs ? pairs->loss
                : evaluate(*run.scheduler, run.split.eval, c, run.pad_id, device, comm, run.sharded != nullptr);
      run.scheduler->prepare_training(run.policy, c.gradient_checkpointing_every_k);  // back to training mode
      const double epoch = static_cast<double>(state.global_step) / static_cast<double>(run.counts.steps_per_epoch);
      nlohmann::json row = {{"step", state.global_step}, {"epoch", epoch}, {"eval_loss", eval_loss}};
      char more[96] = "";
      if (pairs) {
        std::map<std::string, double> values;
        for (const auto& [name, value] : pairs->metrics) row[name] = values[name] = value;
        std::snprintf(more,
                      sizeof more,
                      " | margin %.4f | acc %.2f",
                      values["eval_rewards/margins"],
                      values["eval_rewards/accuracies"]);
      }
      if (metrics) metrics->log(row);
      std::fprintf(out,
                   "eval  %lld/%lld | eval_loss %.4f%s\n",
                   static_cast<long long>(state.global_step),
                   static_cast<long long>(total),
                   eval_loss,
                   more);
      std::fflush(out);
      watchdog.logged_eval();
    }
    if ((save_steps > 0 && state.global_step % save_steps == 0) || step.stop) {
      save_checkpoint_of(run, c, config_yaml, comm, out);
    }
    if (watchdog_stop) {
      std::fprintf(
          out,
          "stopping at step %lld: the loss was above loss_watchdog_threshold %g for %lld logged steps in a row\n",
          static_cast<long long>(state.global_step),
          c.loss_watchdog_threshold,
          static_cast<long long>(c.loss_watchdog_patience));
      break;
    }
    if (step.stop) {
      const int sig = interrupt.received();  // 0 when the signal reached another rank only
      std::fprintf(out,
                   "interrupted by %s at step %lld; resume with resume_from_checkpoint: true\n",
                   sig != 0 ? ("signal " + std::to_string(sig)).c_str() : "a signal to another rank",
                   static_cast<long long>(state.global_step));
      result.interrupted = true;
      break;
    }
  }
  if (metrics) metrics->flush();
  if (!result.interrupted) save_adapter(run, c, comm, out);
  result.steps = state.global_step;
  result.skipped_steps = state.skipped_steps;
  return result;
}

}  // namespace

TrainResult train(const config::RunConfig& c) {
  const auto env = dist::dist_env();
  const auto device = rank_device(resolve_device(c.device), c.device, env);
  dist::Comm comm(env, std::chrono::seconds(c.ddp_timeout), dist::choose_backend(c.ddp_backend, device), device);
  try {
    return train_rank(c, comm, device);
  } catch (const std::exception& e) {
    comm.announce_failure(e);  // See Note [Naming a failed rank] (engine/dist/comm.cpp).
    throw;
  }
}

}  // namespace qtrain::engine::train
