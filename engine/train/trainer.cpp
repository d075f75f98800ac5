// See trainer.h.
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/dataset.h"
#include "engine/data/model_tokenizer.h"
#include "engine/data/run_tokenizer_files.h"
#include "engine/dist/comm.h"
#include "engine/dist/dist_env.h"
#include "engine/dist/sharded_base.h"
#include "engine/io/companion_files.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/lora_attach.h"
#include "engine/model/saved_modules.h"
#include "engine/model/unfrozen_parameters.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/schedule/rng_state.h"
#include "engine/train/clip_grad.h"
#include "engine/train/data_parallel.h"
#include "engine/train/device_plan.h"
#include "engine/train/interrupt.h"
#include "engine/train/loss_watchdog.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/memory_stats.h"
#include "engine/train/metrics_log.h"
#include "engine/train/model_setup.h"
#include "engine/train/optimizer.h"
#include "engine/train/output_dir.h"
#include "engine/train/progress_line.h"
#include "engine/train/run_state.h"
#include "engine/train/run_vocabulary.h"
#include "engine/train/step_intervals.h"
#include "engine/train/training_data.h"
#include "ops/host_read.h"

namespace qtrain::engine::train {
namespace fs = std::filesystem;
namespace {

// LoRA+ (peft's create_loraplus_optimizer): every lora_B (the linears', the routers' and the
// experts') and every 1-D parameter (DoRA's magnitudes, the norms trained in full) at `ratio`
// times the learning rate; lora_A and the embeddings and head trained in full at 1 (peft puts a
// ModulesToSaveWrapper's 2-D weight in its first group, beside lora_A).
std::vector<double> loraplus_lr_scales(const model::CausalLM& lm, const std::vector<at::Tensor>& params, double ratio) {
  std::set<const void*> b;
  for (const auto& [module, adapter] : model::lora_adapters(lm)) {
    b.insert(adapter.b.unsafeGetTensorImpl());
    if (adapter.magnitude.defined()) b.insert(adapter.magnitude.unsafeGetTensorImpl());
  }
  for (const auto& [module, weight] : lm.trained_norms()) b.insert(weight.unsafeGetTensorImpl());
  std::vector<double> scales;
  for (const auto& p : params) scales.push_back(b.count(p.unsafeGetTensorImpl()) != 0 ? ratio : 1.0);
  return scales;
}

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

  // Memory plan (before any weight is loaded), model and adapters.
  auto options = load_options(c);
  options.device = device;
  c10::OptionalDeviceGuard device_guard;
  if (options.device.is_cuda()) device_guard.reset_device(options.device);
  const auto folder = io::HfFolder::open(c.base_model);
  const DevicePlan device_plan = plan_device(c, options.device, comm.world_size());
  options.host_layers = device_plan.residency.host_layers();
  std::fprintf(out,
               "model: %s on %s, %s, base %s\n",
               c.base_model.c_str(),
               options.device.str().c_str(),
               c10::toString(options.dtype),
               base_quantization_note(folder.config(), (c.base_model / "config.json").string(), c).c_str());
  std::fflush(out);
  // See Note [Sharded base] (engine/dist/sharded_base.h): a rank reads 1/N of the layers and
  // keeps its slice of each layer as soon as the layer is loaded.
  std::shared_ptr<dist::ShardedBase> sharded;
  if (device_plan.residency.shard_base()) {
    sharded = std::make_shared<dist::ShardedBase>(comm, device_plan.residency);
    sharded->prepare_load(options);
  }
  const auto load_start = std::chrono::steady_clock::now();
  auto lm = model::CausalLM::load(folder, options);
  if (sharded) {
    sharded->bind_model(lm);
    const int64_t host = sharded->host_shard_bytes();
    std::fprintf(
        out,
        "shard_base: %s of the base's layers on each of %lld ranks%s; this rank read %lld of the %zu layers, "
        "loaded in %.1f s\n",
        offload::format_bytes(sharded->shard_bytes()).c_str(),
        static_cast<long long>(comm.world_size()),
        host > 0 ? (" (" + offload::format_bytes(host) + " of it in pinned host memory: the offloaded layers)").c_str()
                 : "",
        static_cast<long long>(sharded->layers_read()),
        lm.layers().size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  }
  // The tokenizer, with the tokens the run adds, sizes the embeddings before any adapter is
  // attached (See run_vocabulary.h).
  const auto vocabulary = fit_run_vocabulary(lm, c);
  if (!vocabulary.log_line.empty()) std::fprintf(out, "%s\n", vocabulary.log_line.c_str());
  const auto& tokenizer = vocabulary.tokenizer;
  auto lora = lora_config(c, lm.config());
  if (!c.lora_model_dir.empty()) {
    auto loaded = io::load_peft_adapter(c.lora_model_dir);
    lora = loaded.config;
    lora.dropout = c.lora_dropout;  // the run decides its regularisation; the adapter its shape
    lora.validate(c.lora_model_dir.string() + " with this run's lora_dropout");  // expert LoRA takes none
    model::attach_lora(lm, loaded, c.lora_model_dir.string());
    for (auto& layer : lm.layers()) {
      for (auto* l : layer.linears()) {
        if (l->lora) l->lora->dropout = c.lora_dropout;
      }
    }
  } else {
    TORCH_CHECK(!lora.use_dora || !sharded,
                "peft_use_dora with shard_base: a new DoRA adapter's magnitudes start from every layer's whole base "
                "weight, which a rank of a sharded base does not hold. Train the first steps without shard_base and "
                "continue from that adapter with lora_model_dir");
    model::attach_new_lora(lm, lora, static_cast<uint64_t>(c.seed));
  }
  // Modules trained in full beyond the adapter's: the run's lora_modules_to_save (an adapter from
  // lora_model_dir may lack them; they start from the base's weights) and what unfrozen_parameters
  // unfreezes.
  std::vector<std::string> trained_in_full = c.lora_modules_to_save;
  model::Unfrozen unfrozen;
  if (!c.unfrozen_parameters.empty()) {
    // The base's parameters by transformers' names: a bitsandbytes checkpoint's quantization
    // state beside a weight is none.
    std::vector<std::string> names;
    for (const auto& name : folder.tensor_names()) {
      if (name.find(".weight.") == std::string::npos && !name.ends_with(".SCB") && !name.ends_with(".weight_format")) {
        names.push_back(name);
      }
    }
    unfrozen = model::unfrozen_parameters(lm, names, c.unfrozen_parameters, "unfrozen_parameters");
    trained_in_full.insert(trained_in_full.end(), unfrozen.modules_to_save.begin(), unfrozen.modules_to_save.end());
    for (const auto& pattern : unfrozen.unmatched) {
      std::fprintf(out,
                   "unfrozen_parameters: '%s' matches no parameter of the base (they are named like %s and "
                   "model.layers.0.input_layernorm.weight), so it unfreezes nothing; the adapters train as usual\n",
                   pattern.c_str(),
                   (model::embed_tokens_module(lm.config()) + ".weight").c_str());
    }
  }
  for (const std::string& m : trained_in_full) {
    if (std::find(lora.modules_to_save.begin(), lora.modules_to_save.end(), m) == lora.modules_to_save.end()) {
      lora.modules_to_save.push_back(m);
    }
  }
  model::attach_new_saved_modules(lm, lora);  // those not attached yet
  if (!unfrozen.embed_rows.empty()) model::train_rows_only(lm.trained_embed_tokens(), unfrozen.embed_rows);
  if (!unfrozen.head_rows.empty()) model::train_rows_only(lm.trained_lm_head(), unfrozen.head_rows);
  check_new_tokens_trained(lm, vocabulary.added);
  const auto params = lm.trainable_parameters();
  int64_t trainable = 0;
  for (const auto& p : params) trainable += p.numel();
  std::string patterns;
  for (const auto& [key, rank] : lora.rank_pattern) patterns += ", r " + std::to_string(rank) + " for " + key;
  for (const auto& [key, alpha] : lora.alpha_pattern) {
    patterns += ", alpha " + c10::str(alpha) + " for " + key;
  }
  for (const auto& [module, weight] : model::saved_modules(lm)) {
    if (!lm.trained_norms().count(module)) patterns += ", " + module + " trained in full";
  }
  if (!lm.trained_norms().empty())
    patterns += ", " + std::to_string(lm.trained_norms().size()) + " norm(s) trained in full";
  std::fprintf(out,
               "lora: r %lld, alpha %g%s%s%s, %zu tensors, %lld trainable parameters\n",
               static_cast<long long>(lora.r),
               lora.alpha,
               lora.use_rslora ? " (rsLoRA)" : "",
               lora.use_dora ? " (DoRA)" : "",
               patterns.c_str(),
               params.size(),
               static_cast<long long>(trainable));

  // Data, through the model's tokenizer (See training_data.h).
  // Pre-tokenized data pads as before: the byte tokenizer's PAD on the demo model, else 0.
  const auto pad_id = tokenizer                                                         ? tokenizer->pad_id()
                      : data::uses_byte_tokenizer(c.base_model, lm.config().vocab_size) ? data::ByteTokenizer().pad()
                                                                                        : 0;
  // With dataset_prepared_path rank 0 tokenizes and fills the cache first; the others read it.
  const bool cache_first = comm.world_size() > 1 && !c.dataset_prepared_path.empty();
  const std::string cache_wait = "waiting for rank 0 to prepare the datasets in " + c.dataset_prepared_path.string();
  if (cache_first && !comm.lead()) comm.barrier(cache_wait);
  auto samples = load_training_samples(c, tokenizer.get(), out, /*progress=*/comm.lead());
  if (cache_first && comm.lead()) comm.barrier(cache_wait);
  auto split = data::split_for_eval(std::move(samples), c.val_set_size, static_cast<uint64_t>(c.seed));
  data::DataLoader loader(
      split.train, c.micro_batch_size, c.sequence_len, c.sample_packing, static_cast<uint64_t>(c.seed), pad_id);
  // See Note [Data-parallel steps].
  const int64_t step_batches = c.gradient_accumulation_steps * comm.world_size();
  const auto share = step_share(comm, c.gradient_accumulation_steps);
  const int64_t steps_per_epoch = std::max<int64_t>(1, (loader.batches_per_epoch() + step_batches - 1) / step_batches);
  const int64_t total = c.max_steps > 0 ? c.max_steps : steps_per_epoch * c.num_epochs;
  // See Note [Steps per epoch].
  const int64_t eval_steps =
      split.eval.empty() ? 0 : eval_interval(c.eval_steps, c.evals_per_epoch, c.num_epochs, total);
  const int64_t save_steps = save_interval(c.save_steps, c.saves_per_epoch, c.num_epochs, total, steps_per_epoch);
  const LrSchedule lr_schedule{lr_schedule_type_from_name(c.lr_scheduler),
                               c.learning_rate,
                               warmup_steps_for(c.warmup_steps, c.warmup_ratio, total),
                               total};
  std::fprintf(out,
               "data: %zu training samples, %zu held out, %lld micro-batches per epoch, %lld steps, "
               "evaluation every %lld, checkpoint every %lld (0: none)\n",
               split.train.size(),
               split.eval.size(),
               static_cast<long long>(loader.batches_per_epoch()),
               static_cast<long long>(total),
               static_cast<long long>(eval_steps),
               static_cast<long long>(save_steps));
  if (comm.world_size() > 1) {
    std::fprintf(out,
                 "ranks: %lld (%s), a step is %lld micro-batches, %lld on each rank\n",
                 static_cast<long long>(comm.world_size()),
                 dist::backend_name(comm.backend()),
                 static_cast<long long>(step_batches),
                 static_cast<long long>(c.gradient_accumulation_steps));
  }

  const auto optimizer = make_optimizer(
      c.optimizer, params, AdamWOptions{c.learning_rate, c.adam_beta1, c.adam_beta2, c.adam_epsilon, c.weight_decay});
  if (!lm.trained_norms().empty() && c.weight_decay != 0) {
    // transformers' Trainer decays no norm (get_decay_parameter_names).
    std::vector<bool> exempt;
    for (const auto& p : params) {
      exempt.push_back(std::any_of(lm.trained_norms().begin(), lm.trained_norms().end(), [&](const auto& norm) {
        return norm.second.is_same(p);
      }));
    }
    optimizer->set_decay_exempt(std::move(exempt));
  }
  std::string loraplus;
  if (c.loraplus_lr_ratio) {
    optimizer->set_lr_scales(loraplus_lr_scales(lm, params, *c.loraplus_lr_ratio));
    loraplus = c10::str(", LoRA+: lora_B at ", *c.loraplus_lr_ratio, " x learning_rate");
    if (c.loraplus_lr_embedding) loraplus += " (loraplus_lr_embedding: no LoRA on embeddings here, no effect)";
  }
  std::fprintf(out,
               "optimizer: %s, state %.2f MiB%s\n",
               std::string(optimizer->name()).c_str(),
               static_cast<double>(optimizer->state_nbytes()) / (1 << 20),
               loraplus.c_str());
  const auto streamed = make_residency(device_plan, lm, sharded);
  schedule::LayerScheduler scheduler(lm, streamed);
  if (c.tiled_mlp) {
    const auto tiled = std::make_shared<schedule::TiledMlp>(c.tiled_mlp_num_shards);
    scheduler.tile_mlp(tiled);
    std::fprintf(out,
                 "tiled MLP: each layer's MLP in %lld chunk(s) of the %lld tokens of a micro-batch\n",
                 static_cast<long long>(tiled->shards_of(c.micro_batch_size * c.sequence_len)),
                 static_cast<long long>(c.micro_batch_size * c.sequence_len));
  }
  if (device_plan.residency.offload_activations()) {
    scheduler.offload_activations(std::make_shared<schedule::OffloadedActivations>(
        device_plan.copy_engine, device_plan.residency.prefetch_depth()));
    std::fprintf(out,
                 "activation offloading: checkpointed layers' inputs wait in %s host memory, fetched %lld layer(s) "
                 "ahead of their recompute\n",
                 options.device.is_cuda() ? "pinned" : "(simulated)",
                 static_cast<long long>(device_plan.residency.prefetch_depth() + 1));
  }
  const auto policy = c.gradient_checkpointing == config::GradientCheckpointing::off ? schedule::CheckpointPolicy::none
                      : c.gradient_checkpointing == config::GradientCheckpointing::every_kth
                          ? schedule::CheckpointPolicy::every_kth
                          : schedule::CheckpointPolicy::every_layer;

  // Resume.
  RunState state;
  if (!resume.empty()) {
    auto ck = load_checkpoint(resume);
    TORCH_CHECK(ck.state.world_size == comm.world_size(),
                resume.string(),
                " was written by a run of ",
                ck.state.world_size,
                " rank(s) and this run has ",
                comm.world_size(),
                "; its data position and generator states belong to that many. Resume it with ",
                ck.state.world_size,
                " rank(s) (torchrun --nproc-per-node / qtrain launch --nproc), or start a new run from its "
                "adapter with lora_model_dir: ",
                resume.string());
    at::NoGradGuard no_grad;
    for (const auto& [module, adapter] : model::lora_adapters(lm)) {
      const auto it = ck.adapters.find(module);
      TORCH_CHECK(it != ck.adapters.end(),
                  (resume / io::kPeftWeightsFile).string(),
                  ": the checkpoint has no adapter for ",
                  module,
                  "; it belongs to a run with other lora_target_modules or lora_target_parameters: resume with that "
                  "run's config, or start a new run");
      TORCH_CHECK(it->second.a.sizes() == adapter.a.sizes() && it->second.b.sizes() == adapter.b.sizes(),
                  (resume / io::kPeftWeightsFile).string(),
                  ": '",
                  io::kPeftKeyPrefix,
                  module,
                  ".lora_A.weight' is ",
                  it->second.a.sizes(),
                  " and lora_B ",
                  it->second.b.sizes(),
                  ", but this run's model needs ",
                  adapter.a.sizes(),
                  " and ",
                  adapter.b.sizes(),
                  "; the checkpoint belongs to a run with another base model or lora_r: resume with that run's "
                  "base_model and config, or start a new run");
      TORCH_CHECK(it->second.magnitude.defined() == adapter.magnitude.defined(),
                  (resume / io::kPeftWeightsFile).string(),
                  ": '",
                  module,
                  adapter.magnitude.defined() ? "' has no DoRA magnitude, but this run trains DoRA (peft_use_dora)"
                                              : "' has a DoRA magnitude, but this run trains plain LoRA",
                  "; resume with that run's config, or start a new run");
      adapter.a.copy_(it->second.a);
      adapter.b.copy_(it->second.b);
      if (adapter.magnitude.defined()) adapter.magnitude.copy_(it->second.magnitude);
    }
    const auto saved = model::saved_modules(lm);
    for (const auto& [module, weight] : saved) {
      const auto it = ck.saved_modules.find(module);
      TORCH_CHECK(it != ck.saved_modules.end() && it->second.sizes() == weight.sizes(),
                  (resume / io::kPeftWeightsFile).string(),
                  ": the checkpoint has ",
                  it == ck.saved_modules.end() ? std::string("no weight") : c10::str("a weight ", it->second.sizes()),
                  " for '",
                  module,
                  "', which this run trains in full as ",
                  weight.sizes(),
                  "; it belongs to a run with other lora_modules_to_save or another base: resume with that run's "
                  "config, or start a new run");
      weight.copy_(it->second);
    }
    TORCH_CHECK(ck.saved_modules.size() == saved.size(),
                (resume / io::kPeftWeightsFile).string(),
                ": the checkpoint trains ",
                ck.saved_modules.size(),
                " module(s) in full and this run ",
                saved.size(),
                "; resume with the lora_modules_to_save of the run that wrote it");
    load_optimizer_state(ck, resume, *optimizer);
    state = ck.state;
    schedule::set_rng_state(at::kCPU, state.rng_cpu.at(comm.rank()));
    if (!state.rng_cuda.empty() && options.device.is_cuda()) {
      schedule::set_rng_state(options.device, state.rng_cuda.at(comm.rank()));
    }
    loader.seek(state.data);
    std::fprintf(out, "resume: %s at step %lld\n", resume.c_str(), static_cast<long long>(state.global_step));
  }

  std::optional<MetricsLog> metrics;  // rank 0's
  if (comm.lead()) metrics.emplace(c.output_dir, c.use_tensorboard);
  InterruptGuard interrupt;
  TrainResult result;
  result.output_dir = c.output_dir;
  result.lead = comm.lead();
  const auto plan = scheduler.prepare_training(policy, c.gradient_checkpointing_every_k);
  auto save = [&] {
    const std::string name = "checkpoint-" + std::to_string(state.global_step);
    state.data = loader.position();
    state.world_size = comm.world_size();
    state.rng_cpu = gather_states(comm, schedule::rng_state(at::kCPU), "gathering generator states for " + name);
    state.rng_cuda.clear();
    if (options.device.is_cuda()) {
      state.rng_cuda =
          gather_states(comm, schedule::rng_state(options.device), "gathering generator states for " + name);
    }
    if (comm.lead()) {
      const auto dir = save_checkpoint(c.output_dir,
                                       state,
                                       *optimizer,
                                       lora,
                                       model::lora_adapters(lm),
                                       model::saved_modules(lm),
                                       c.base_model.string(),
                                       config_yaml);
      prune_checkpoints(c.output_dir, c.save_total_limit);
      std::fprintf(out, "checkpoint: %s\n", dir.c_str());
    }
    comm.barrier("waiting for rank 0 to write " + name);
  };

  int64_t consecutive_bad = 0, window_steps = 0, window_tokens = 0, copied_logged = 0, step_logged = state.global_step;
  double window_loss = 0, window_aux = 0, last_grad_norm = 0, window_comm = 0;
  // See Note [Load-balancing loss] (engine/model/load_balancing.h).
  const auto& moe = lm.config().moe;
  const bool aux_on = moe && moe->output_router_logits;
  const double aux_coef = aux_on ? moe->router_aux_loss_coef : 0.0;
  auto window_start = std::chrono::steady_clock::now();
  LossWatchdog watchdog(c.loss_watchdog_threshold, c.loss_watchdog_patience);
  std::fflush(out);
  // The first window's peak is the steps', not the load's or the bandwidth probe's.
  reset_peak_memory(options.device);
  while (state.global_step < total) {
    std::vector<data::Batch> batches;  // this rank's share of the step
    int64_t step_tokens = 0;
    for (int64_t i = 0; i < step_batches; ++i) {
      auto b = loader.next();
      step_tokens += b.tokens();
      window_tokens += (b.segment_ids >= 0).sum().item<int64_t>();
      if (i >= share.first && i < share.first + share.count) batches.push_back(std::move(b));
    }
    // Token-weighted mean over the whole step (transformers' num_items_in_batch): each
    // micro-batch's summed loss is divided by the step's predicted-token count. The
    // load-balancing loss is each micro-batch's own, added with its coefficient unscaled, as the
    // HF Trainer adds the model's (See Note [Load-balancing loss in a step]).
    // The losses add up on the device, in float64 as the host added them before (Note [Host reads]).
    const auto zero = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(options.device));
    at::Tensor loss_acc = zero, aux_acc = zero;
    int64_t recomputed = 0;
    try {
      for (const auto& b : batches) {
        const auto r = scheduler.train_forward(plan, step_inputs(b, options.device, c.sample_packing));
        auto objective = r.loss_sum / static_cast<double>(std::max<int64_t>(1, step_tokens));
        if (const auto& aux = scheduler.aux_loss(); aux.defined()) {
          objective = objective + aux_coef * aux;
          aux_acc = aux_acc + aux.detach().to(at::kDouble);
        }
        objective.backward();
        recomputed += scheduler.stats().layers_recomputed;
        loss_acc = loss_acc + r.loss_sum.detach().to(at::kDouble);
      }
    } catch (const c10::OutOfMemoryError& e) {
      TORCH_CHECK(false, out_of_memory_report(device_plan, c, state.global_step + 1, e.what_without_backtrace()));
    }
    // One decision for every rank: the summed gradients and loss, and a stop if any rank was asked to.
    const double comm_before = comm.seconds();
    const std::string step_name = "step " + std::to_string(state.global_step + 1);
    sum_gradients(comm, params, "summing the gradients of " + step_name);
    // The step's one read before clipping: its loss, its load-balancing loss and whether every
    // (summed) gradient is finite.
    const auto read =
        ops::read_to_host(at::stack({loss_acc, aux_acc, grads_finite(params).to(loss_acc.device(), at::kDouble)}),
                          "step: loss and finite gradients");
    double step_loss = read[0].item<double>();
    const bool finite_grads = read[2].item<double>() != 0;
    const auto sums = sum_over_ranks(comm,
                                     {step_loss, interrupt.received() != 0 ? 1.0 : 0.0, read[1].item<double>()},
                                     "summing the loss of " + step_name);
    step_loss = sums[0];
    const bool stop = sums[1] > 0;
    window_comm += comm.seconds() - comm_before;
    step_loss = step_loss / static_cast<double>(std::max<int64_t>(1, step_tokens)) + aux_coef * sums[2];
    if (!std::isfinite(step_loss) || !finite_grads) {
      optimizer->zero_grad();
      ++state.skipped_steps;
      TORCH_CHECK(++consecutive_bad < kMaxConsecutiveNonFinite,
                  "stopping: ",
                  consecutive_bad,
                  " steps in a row had a non-finite loss or gradient (last loss ",
                  step_loss,
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
      last_grad_norm = clip_grad_norm(params, c.max_grad_norm);
      optimizer->step(lr_schedule.lr_at(state.global_step));
      optimizer->zero_grad();
      window_loss += step_loss;
      window_aux += sums[2] / static_cast<double>(step_batches);
      ++window_steps;
    }
    ++state.global_step;
    const double epoch = static_cast<double>(state.global_step) / static_cast<double>(steps_per_epoch);
    const bool watchdog_stop = watchdog.step_end();

    if (state.global_step % c.logging_steps == 0 || state.global_step == total) {
      const auto now = std::chrono::steady_clock::now();
      const double window_s = std::chrono::duration<double>(now - window_start).count();
      const double elapsed = std::chrono::duration<double>(now - t_start).count();
      const double loss = window_steps > 0 ? window_loss / window_steps : std::nan("");
      const double lr = lr_schedule.lr_at(state.global_step);  // the next step's, as the Trainer logs it
      const double tps = window_s > 0 ? static_cast<double>(window_tokens) / window_s : 0.0;
      const int64_t peak = peak_memory_bytes(options.device);
      // Host-to-device bytes of offloaded layers per step, over the steps since the last line (a
      // sharded base's gathers are in comm_seconds).
      const int64_t copied = streamed && !sharded ? streamed->stats().ring.copied_bytes : 0;
      const int64_t steps_in_window = std::max<int64_t>(1, state.global_step - step_logged);
      const int64_t copied_per_step = (copied - copied_logged) / steps_in_window;
      copied_logged = copied;
      step_logged = state.global_step;
      const double aux = window_steps > 0 ? window_aux / window_steps : std::nan("");
      if (metrics) {
        nlohmann::json row = {{"step", state.global_step},
                              {"epoch", epoch},
                              {"loss", loss},
                              {"learning_rate", lr},
                              {"grad_norm", last_grad_norm},
                              {"tokens_per_second", tps},
                              {"peak_memory_bytes", peak},
                              {"recomputed_layers", recomputed},
                              {"offload_bytes_per_step", copied_per_step},
                              {"comm_seconds", window_comm / static_cast<double>(steps_in_window)},
                              {"skipped_steps", state.skipped_steps}};
        if (aux_on) row["aux_loss"] = aux;
        // What the plan counted for the same peak (the allocator's allocated bytes), on CUDA.
        if (device_plan.memory && options.device.is_cuda()) {
          row["planned_peak_bytes"] = device_plan.memory->allocated_bytes;
        }
        metrics->log(row);
      }
      const double per_step = elapsed / static_cast<double>(std::max<int64_t>(1, state.global_step));
      char aux_text[32] = "";
      if (aux_on) std::snprintf(aux_text, sizeof aux_text, " (aux %.4f)", aux);
      std::fprintf(
          out,
          "step %lld/%lld | epoch %.2f | loss %.4f%s | lr %.3e | grad %.3f | %.0f tok/s | %s < %s | peak %.2f GiB\n",
          static_cast<long long>(state.global_step),
          static_cast<long long>(total),
          epoch,
          loss,
          aux_text,
          lr,
          last_grad_norm,
          tps,
          clock_text(elapsed).c_str(),
          clock_text(per_step * static_cast<double>(total - state.global_step)).c_str(),
          static_cast<double>(peak) / (1 << 30));
      std::fflush(out);
      result.last_loss = loss;
      watchdog.logged_loss(loss);
      window_loss = 0;
      window_aux = 0;
      window_steps = 0;
      window_tokens = 0;
      window_comm = 0;
      window_start = now;
      reset_peak_memory(options.device);
    }
    if (eval_steps > 0 && (state.global_step % eval_steps == 0 || state.global_step == total)) {
      const double eval_loss = evaluate(scheduler, split.eval, c, pad_id, options.device, comm, sharded != nullptr);
      scheduler.prepare_training(policy, c.gradient_checkpointing_every_k);  // back to training mode
      if (metrics) metrics->log({{"step", state.global_step}, {"epoch", epoch}, {"eval_loss", eval_loss}});
      std::fprintf(out,
                   "eval  %lld/%lld | eval_loss %.4f\n",
                   static_cast<long long>(state.global_step),
                   static_cast<long long>(total),
                   eval_loss);
      std::fflush(out);
      watchdog.logged_eval();
    }
    if ((save_steps > 0 && state.global_step % save_steps == 0) || stop) save();
    if (watchdog_stop) {
      std::fprintf(
          out,
          "stopping at step %lld: the loss was above loss_watchdog_threshold %g for %lld logged steps in a row\n",
          static_cast<long long>(state.global_step),
          c.loss_watchdog_threshold,
          static_cast<long long>(c.loss_watchdog_patience));
      break;
    }
    if (stop) {
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
  if (!result.interrupted) {
    comm.barrier("waiting for every rank to finish training");
    if (comm.lead()) {
      io::save_peft_adapter(c.output_dir,
                            lora,
                            model::lora_adapters(lm),
                            c.base_model.string(),
                            at::kFloat,
                            io::AdapterFolder::shared,
                            model::saved_modules(lm));
      std::fprintf(out, "adapter: %s (PEFT: adapter_config.json, adapter_model.safetensors)\n", c.output_dir.c_str());
      // With new tokens the adapter means nothing without the tokenizer that made their ids: it
      // goes beside the adapter, as axolotl saves it.
      if (!vocabulary.added.empty()) {
        io::copy_companion_files(c.base_model, c.output_dir, io::Companions::tokenizer);
        data::write_run_tokens(c.output_dir, c, *vocabulary.tokenizer);
        std::fprintf(out, "tokenizer: %s, with the run's special_tokens and tokens\n", c.output_dir.c_str());
      }
    }
    comm.barrier("waiting for rank 0 to write the adapter");
  }
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
