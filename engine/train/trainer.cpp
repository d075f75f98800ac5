// See trainer.h and Note [Training phases].
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
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
#include "engine/train/sync_check.h"
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
  auto to = [&](const at::Tensor& t) { return ops::to_device_async(t, device); };
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
//   optimizer step     gradients summed over the ranks, clipping, the update, which the device
//                      skips where the loss or a gradient is not finite (apply_step; the host
//                      learns of it one step later, settle: Note [Steps decided on the device]);
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

// Note [Steps decided on the device]
// A training step reads nothing from the device unless it logs (Note [Host reads] in
// ops/host_read.h). Its loss, its load-balancing losses, whether a gradient is not finite, a stop
// request and a preference objective's metrics travel in one float64 vector, summed over the
// ranks on the device. From it the device decides whether the step applies (its loss and every
// summed gradient finite), and the optimizer takes the decision as a tensor (Optimizer::step's
// `apply`): a skipped step leaves the adapter and the optimizer state as they were, bit for bit,
// as when the host decided. The log window adds up the applied steps' values on the device; the
// host reads them once per logging step. What the host does itself (counting a skipped step and
// taking back the optimizer's step counter, stopping after kMaxConsecutiveNonFinite in a row,
// stopping on a signal) it does one step late (Note [Lagged reads]): step k's values are read at
// step k + 1, after that step's forward and backward are queued and before its update. Whatever
// goes to disk or to the console waits for the current step's values first (settle): the log
// line, a checkpoint, the run's end. So a signal stops the run at the end of the step after the
// one it arrived in (or of the step it arrived in, when that step saves or logs), with a
// checkpoint of the step it stops at; a signal during the last step lets the run finish.

// A step's values on the device (Note [Steps decided on the device]), the same on every rank.
struct StepOutcome {
  at::Tensor applied;    // bool scalar: the loss and every gradient were finite, the update applied
  at::Tensor logged;     // float64 [2 + metrics]: the loss as the Trainer logs it, the mean
                         // load-balancing loss per micro-batch, then preference tuning's metric
                         // values (preference_metric_slots), means over the micro-batches
  at::Tensor grad_norm;  // float64 scalar, before clipping
  at::Tensor host;       // float64 [3]: applied, a stop request, the loss: for the host, one step late
};

// The step's loss as the Trainer logs it, its load-balancing and metric sums and its decisions,
// summed over the ranks on the device; then clipping and the update, which applies where the
// decision says (the optimizer untouched otherwise).
StepOutcome apply_step(TrainingRun& run,
                       const StepSums& sums,
                       const StepBatches& batches,
                       const config::RunConfig& c,
                       double aux_coef,
                       dist::Comm& comm,
                       const InterruptGuard& interrupt) {
  const auto& params = run.params;
  sum_gradients(comm, params, "summing the gradients of step " + std::to_string(run.state.global_step + 1));
  const auto options = sums.loss.options();  // float64 on the compute device
  // The loss, the load-balancing losses, a non-finite gradient (1 per rank), a stop request (1
  // per rank that received a signal), then a preference objective's metrics.
  auto values = at::stack({sums.loss,
                           sums.aux,
                           at::logical_not(grads_finite(params)).to(options),
                           at::full({}, interrupt.received() != 0 ? 1.0 : 0.0, options)});
  if (sums.metrics.defined()) values = at::cat({values, sums.metrics});
  if (comm.world_size() > 1) {
    comm.allreduce_sum(values, "summing the loss of step " + std::to_string(run.state.global_step + 1));
  }
  // A preference step's loss is already the ranks' shares of its mean (preference_step.h).
  const auto loss = run.pairs ? values[0]
                              : values[0] / static_cast<double>(std::max<int64_t>(1, batches.predicted_tokens)) +
                                    aux_coef * values[1];
  const double micro_batches = static_cast<double>(run.counts.step_batches);
  StepOutcome out;
  out.applied = at::logical_and(at::isfinite(loss), values[2] == 0);
  out.grad_norm = clip_grad_norm(params, c.max_grad_norm).to(options);
  run.optimizer->step(run.lr_schedule.lr_at(run.state.global_step), out.applied);
  run.optimizer->zero_grad();
  out.logged = at::cat({at::stack({loss, values[1] / micro_batches}), values.slice(0, 4) / micro_batches});
  out.host = at::stack({out.applied.to(options), values[3], loss});
  return out;
}

// The steps whose values the host has not read yet: the last one, read at the next step or when
// the host must know (Note [Steps decided on the device]).
struct StepInFlight {
  ops::LaggedRead read;  // the step's StepOutcome::host
  int64_t step = 0;      // its number
  int64_t consecutive_bad = 0;
  bool stop = false;  // a rank received a signal
};

// The host's part of the step in flight, once its values are read: a skipped step counted (and the
// optimizer's counter taken back), too many in a row an error, a stop request noted.
void settle(StepInFlight& f, TrainingRun& run, const config::RunConfig& c, std::FILE* out) {
  if (!f.read.pending()) return;
  const auto values = f.read.finish();
  const auto* v = values.const_data_ptr<double>();
  f.stop = f.stop || v[1] > 0;
  if (v[0] != 0) {
    f.consecutive_bad = 0;
    return;
  }
  ++run.state.skipped_steps;
  run.optimizer->step_skipped();
  TORCH_CHECK(++f.consecutive_bad < kMaxConsecutiveNonFinite,
              "stopping: ",
              f.consecutive_bad,
              " steps in a row had a non-finite loss or gradient (last loss ",
              v[2],
              ", step ",
              f.step,
              "). Lower learning_rate, check the data for empty or broken rows, or "
              "train in bf16/float32 rather than fp16. The last checkpoint in ",
              c.output_dir.string(),
              " is intact.");
  std::fprintf(out, "step %lld: non-finite loss or gradient, step skipped\n", static_cast<long long>(f.step));
}

// The steps since the last progress line: what the line and metrics.jsonl report.
struct LogWindow {
  at::Tensor sums = {};  // float64 on the device: the applied steps, then their StepOutcome::logged summed
  int64_t tokens = 0;
  double comm_seconds = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int64_t copied_logged = 0;  // offload bytes counted at the last line
  int64_t step_logged = 0;    // the step of the last line

  void add(const StepOutcome& s) {
    const auto row = at::cat({at::ones({1}, s.logged.options()), s.logged});
    const auto masked = at::where(s.applied, row, at::zeros_like(row));
    sums = sums.defined() ? sums + masked : masked;
  }
};

// The progress line and metrics row of the window that ends at this step, then a new window; the
// log's one host read (the window's sums and the last applied step's gradient norm). Returns the
// window's mean loss.
double log_window(LogWindow& w,
                  TrainingRun& run,
                  const config::RunConfig& c,
                  std::optional<MetricsLog>& metrics,
                  std::chrono::steady_clock::time_point t_start,
                  int64_t recomputed,
                  const at::Tensor& last_grad_norm,
                  bool aux_on,
                  std::FILE* out) {
  const auto read = ops::read_to_host(at::cat({w.sums, last_grad_norm.reshape({1})}),
                                      "log: the window's loss, metrics and gradient norm")
                        .contiguous();
  const auto* values = read.const_data_ptr<double>();
  const int64_t n = read.numel();
  const double steps = values[0];
  const auto mean = [&](int64_t i) { return steps > 0 ? values[i] / steps : std::nan(""); };
  const double loss = mean(1), aux = mean(2), grad_norm = values[n - 1];
  std::vector<double> window_metrics;
  for (int64_t i = 3; i < n - 1; ++i) window_metrics.push_back(mean(i));
  const auto logged_metrics = window_metrics.empty() || steps == 0 ? std::vector<std::pair<std::string, double>>()
                                                                   : preference_metrics(c.rl, window_metrics, "");
  const auto& state = run.state;
  const int64_t total = run.counts.total;
  const auto& device = run.options.device;
  const auto now = std::chrono::steady_clock::now();
  const double window_s = std::chrono::duration<double>(now - w.start).count();
  const double elapsed = std::chrono::duration<double>(now - t_start).count();
  const double epoch = static_cast<double>(state.global_step) / static_cast<double>(run.counts.steps_per_epoch);
  const double lr = run.lr_schedule.lr_at(state.global_step);  // the next step's, as the Trainer logs it
  const double tps = window_s > 0 ? static_cast<double>(w.tokens) / window_s : 0.0;
  const int64_t peak = peak_memory_bytes(device);
  // Host-to-device bytes of offloaded layers per step, over the steps since the last line (a
  // sharded base's gathers are in comm_seconds).
  const int64_t copied = run.streamed && !run.sharded ? run.streamed->stats().ring.copied_bytes : 0;
  const int64_t steps_in_window = std::max<int64_t>(1, state.global_step - w.step_logged);
  const int64_t copied_per_step = (copied - w.copied_logged) / steps_in_window;
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
    for (const auto& [name, value] : logged_metrics) row[name] = value;
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
  if (!logged_metrics.empty()) {
    std::snprintf(aux_text, sizeof aux_text, "%s", preference_progress(logged_metrics, "").c_str());
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
  if (c.precompute_ref_log_probs) {
    precompute_reference(run, c, comm, out);  // Note [Precomputed reference]
    run.reference.reset();                    // every reference the run needs is computed
  }
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
  StepInFlight in_flight;
  // The last applied step's gradient norm, on the device.
  auto grad_norm = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  LogWindow window{.step_logged = state.global_step};
  LossWatchdog watchdog(c.loss_watchdog_threshold, c.loss_watchdog_patience);
  std::fflush(out);
  // The first window's peak is the steps', not the load's or the bandwidth probe's.
  reset_peak_memory(device);
  SyncCheck sync_check(device);
  const int64_t first_step = state.global_step + 1;
  while (state.global_step < total) {
    // What this step does beyond training; the steps that do none of it read nothing from the
    // device (Note [Sync check]).
    const int64_t number = state.global_step + 1;
    const bool logs = number % c.logging_steps == 0 || number == total;
    const bool evaluates = eval_steps > 0 && (number % eval_steps == 0 || number == total);
    const bool saves = save_steps > 0 && number % save_steps == 0;
    sync_check.set_active(number > first_step && !logs && !evaluates && !saves);
    const auto batches = next_step_batches(run, c.sequence_len);
    window.tokens += batches.real_tokens;
    StepSums sums;
    try {
      sums = run.pairs ? preference_forward_backward(run, plan, batches.mine_pairs, c, aux_coef)
                       : forward_backward(run, plan, batches, c, aux_coef);
    } catch (const c10::OutOfMemoryError& e) {
      TORCH_CHECK(false, out_of_memory_report(run.device_plan, c, state.global_step + 1, e.what_without_backtrace()));
    }
    // The previous step's values, read while this step's work is queued.
    settle(in_flight, run, c, out);
    const double comm_before = comm.seconds();
    const auto step = apply_step(run, sums, batches, c, aux_coef, comm, interrupt);
    window.comm_seconds += comm.seconds() - comm_before;
    in_flight.read.start(step.host, "step: applied, stop request and loss");
    in_flight.step = state.global_step + 1;
    window.add(step);
    grad_norm = at::where(step.applied, step.grad_norm, grad_norm);
    ++state.global_step;
    sync_check.set_active(false);
    const bool watchdog_stop = watchdog.step_end();
    if (logs) {
      settle(in_flight, run, c, out);
      result.last_loss = log_window(window, run, c, metrics, t_start, sums.recomputed, grad_norm, aux_on, out);
      watchdog.logged_loss(result.last_loss);
    }
    if (evaluates) {
      // Preference tuning evaluates its held-out pairs by its objective (preference_step.h).
      const auto pairs = run.pairs ? std::optional(evaluate_pairs(run, c, comm)) : std::nullopt;
      const double eval_loss =
          pairs ? pairs->loss
                : evaluate(*run.scheduler, run.split.eval, c, run.pad_id, device, comm, run.sharded != nullptr);
      run.scheduler->prepare_training(run.policy, c.gradient_checkpointing_every_k);  // back to training mode
      const double epoch = static_cast<double>(state.global_step) / static_cast<double>(run.counts.steps_per_epoch);
      nlohmann::json row = {{"step", state.global_step}, {"epoch", epoch}, {"eval_loss", eval_loss}};
      std::string more;
      if (pairs) {
        for (const auto& [name, value] : pairs->metrics) row[name] = value;
        more = preference_progress(pairs->metrics, "eval_");
      }
      if (metrics) metrics->log(row);
      std::fprintf(out,
                   "eval  %lld/%lld | eval_loss %.4f%s\n",
                   static_cast<long long>(state.global_step),
                   static_cast<long long>(total),
                   eval_loss,
                   more.c_str());
      std::fflush(out);
      watchdog.logged_eval();
    }
    if (saves || in_flight.stop) {
      settle(in_flight, run, c, out);
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
    if (in_flight.stop && state.global_step < total) {
      const int sig = interrupt.received();  // 0 when the signal reached another rank only
      std::fprintf(out,
                   "interrupted by %s at step %lld; resume with resume_from_checkpoint: true\n",
                   sig != 0 ? ("signal " + std::to_string(sig)).c_str() : "a signal to another rank",
                   static_cast<long long>(state.global_step));
      result.interrupted = true;
      break;
    }
  }
  settle(in_flight, run, c, out);
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
