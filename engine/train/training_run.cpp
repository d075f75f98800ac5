// See training_run.h.
#include "engine/train/training_run.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/dataset.h"
#include "engine/data/kto_rows.h"
#include "engine/data/model_tokenizer.h"
#include "engine/data/preference_types.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/lora_attach.h"
#include "engine/model/saved_modules.h"
#include "engine/model/unfrozen_parameters.h"
#include "engine/schedule/rng_state.h"
#include "engine/train/model_setup.h"
#include "engine/train/step_intervals.h"
#include "engine/train/training_data.h"

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

// Puts `run` where the checkpoint `resume` left it: adapters, modules trained in full, optimizer
// state, generators and data position, each checked against this run's.
void resume_run(TrainingRun& run, const fs::path& resume, dist::Comm& comm, std::FILE* out) {
  auto& lm = *run.lm;
  auto& state = run.state;
  const auto& optimizer = run.optimizer;
  const auto& options = run.options;
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
  run.loader ? run.loader->seek(state.data) : run.pairs->seek(state.data);
  std::fprintf(out, "resume: %s at step %lld\n", resume.c_str(), static_cast<long long>(state.global_step));
}

// Whether the run's reference is a copy of its starting weights (Note [Reference adapter]): an
// objective with a reference, continuing the adapter of lora_model_dir or training norms in full
// (which replace the base's in their layers, so AdaptersOff cannot give the base back).
bool reference_from_starting_weights(const config::RunConfig& c, const model::CausalLM& lm) {
  return !c.rl.empty() && c.rl != "orpo" && c.rl != "simpo" &&
         (!c.lora_model_dir.empty() || !lm.trained_norms().empty());
}

// What preference tuning needs that a config may not give.
void check_preference_run(const config::RunConfig& c, const dist::Comm& comm) {
  TORCH_CHECK(!c.sample_packing,
              "rl: preference pairs are not packed (TRL's padding_free is off by default); set sample_packing: false");
  // A user-defined type's keys of the other kind of row would change nothing.
  for (const auto& d : c.datasets) {
    if (d.type != "user_defined.default") continue;
    const config::UserDefinedType unset;
    const auto& u = d.user_defined;
    std::vector<std::string> pair_keys, kto_keys;
    if (u.field_chosen != unset.field_chosen) pair_keys.push_back("field_chosen");
    if (u.field_rejected != unset.field_rejected) pair_keys.push_back("field_rejected");
    if (!u.chosen_format.empty()) pair_keys.push_back("chosen_format");
    if (!u.rejected_format.empty()) pair_keys.push_back("rejected_format");
    if (u.field_completion != unset.field_completion) kto_keys.push_back("field_completion");
    if (u.field_label != unset.field_label) kto_keys.push_back("field_label");
    if (!u.completion_format.empty()) kto_keys.push_back("completion_format");
    const auto& other = c.rl == "kto" ? pair_keys : kto_keys;
    std::string named;
    for (const auto& key : other) named += (named.empty() ? "" : ", ") + key;
    TORCH_CHECK(other.empty(),
                "dataset ",
                d.path.string(),
                ": its user-defined type sets ",
                named,
                c.rl == "kto" ? ", a pair's, and rl: kto's rows are a completion and a label (field_completion, "
                                "field_label, completion_format)"
                              : ", KTO's, and rl: " + c.rl +
                                    " reads pairs (field_chosen, field_rejected, chosen_format, rejected_format)",
                "; remove it");
  }
  if (c.rl != "kto") return;
  TORCH_CHECK(
      c.micro_batch_size > 1 || c.kto_loss_type == "apo_zero_unpaired",
      "rl: kto estimates its KL term from a micro-batch's mismatched prompts and completions, which needs "
      "micro_batch_size 2 or more (TRL's KTOTrainer requires it too; kto_loss_type: apo_zero_unpaired has no KL "
      "term); got ",
      c.micro_batch_size);
  TORCH_CHECK(comm.world_size() == 1,
              "rl: kto runs on one process for now: TRL averages each micro-batch's KL estimate over the processes, "
              "which qtrain does not do yet; run with one process (",
              comm.world_size(),
              " here)");
  for (const auto& d : c.datasets) {
    TORCH_CHECK(!data::is_preference_type(d.type) || data::is_kto_type(d.type),
                "dataset ",
                d.path.string(),
                ": rl: kto reads axolotl's KTO types, chatml.* and llama3.* with argilla, argilla_chat, intel, "
                "prompt_pairs or ultra, and the user-defined type; ",
                d.type,
                " is not one of them");
  }
}

// TRL's advice on KTO's weights where the desirable and undesirable rows are not as many
// (KTOTrainer._prepare_dataset): desirable_weight * desirable should be 1 to 1.33 times
// undesirable_weight * undesirable. Only a line to `out`, as TRL only warns.
void kto_weight_advice(const std::vector<data::PreferencePair>& rows, const config::RunConfig& c, std::FILE* out) {
  const auto desirable = static_cast<double>(
      std::max<ptrdiff_t>(1, std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.desirable; })));
  const double undesirable = std::max(1.0, static_cast<double>(rows.size()) - desirable);
  if (desirable == undesirable) return;
  const double dw = c.kto_desirable_weight, uw = c.kto_undesirable_weight;
  const auto round2 = [](double v) { return std::round(v * 100) / 100; };
  const double dw_low = round2(undesirable * uw / desirable), dw_high = round2(undesirable * uw / desirable * 1.33);
  const double uw_low = round2(desirable * dw / undesirable / 1.33), uw_high = round2(desirable * dw / undesirable);
  if ((dw >= dw_low && dw <= dw_high) || (uw >= uw_low && uw <= uw_high)) return;
  std::fprintf(out,
               "rl: kto: %.0f desirable and %.0f undesirable rows; TRL advises kto_desirable_weight in [%g, %g] or "
               "kto_undesirable_weight in [%g, %g] so that the two kinds weigh about the same\n",
               desirable,
               undesirable,
               dw_low,
               dw_high,
               uw_low,
               uw_high);
}

}  // namespace

data::DataLoader::Position data_position(const TrainingRun& run) {
  return run.loader ? run.loader->position() : run.pairs->position();
}

TrainingRun set_up_training(
    const config::RunConfig& c, dist::Comm& comm, const at::Device& device, const fs::path& resume, std::FILE* out) {
  TORCH_CHECK(!c.precompute_ref_log_probs || c.rl == "dpo" || c.rl == "ipo" || c.rl == "kto",
              "precompute_ref_log_probs: ",
              c.rl.empty() ? std::string("a supervised run") : "rl " + c.rl,
              " has no reference to precompute; remove the key, or use rl: dpo, ipo or kto");
  if (!c.rl.empty()) check_preference_run(c, comm);
  // Memory plan (before any weight is loaded), model and adapters.
  auto options = load_options(c);
  options.device = device;
  const auto folder = io::HfFolder::open(c.base_model);
  DevicePlan device_plan = plan_device(c, options.device, comm.world_size());
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
  auto lm_ptr = std::make_unique<model::CausalLM>(model::CausalLM::load(folder, options));
  auto& lm = *lm_ptr;
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
  auto vocabulary = fit_run_vocabulary(lm, c);
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
  if (!c.rl.empty() && c.lora_dropout > 0) {
    // TRL's preference trainers turn every dropout off (disable_dropout, true by default), LoRA's
    // included; the saved adapter_config.json keeps the configured value, as peft's does.
    for (auto& layer : lm.layers()) {
      for (auto* l : layer.linears()) {
        if (l->lora) l->lora->dropout = 0;
      }
    }
    std::fprintf(out,
                 "rl: lora_dropout %g is off while training, as TRL's disable_dropout (true by default) turns it off\n",
                 c.lora_dropout);
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
  data::Split split;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<data::PairLoader> pairs;
  std::vector<data::PreferencePair> eval_pairs;
  size_t train_rows = 0;
  if (!c.rl.empty()) {
    // Preference tuning: pairs (Note [Preference batch]), held out as samples are.
    auto read = load_preference_pairs(c, lm.config().vocab_size, tokenizer.get(), out);
    const auto is_eval = data::held_out_rows(read.size(), c.val_set_size, static_cast<uint64_t>(c.seed));
    std::vector<data::PreferencePair> train_pairs;
    for (size_t i = 0; i < read.size(); ++i) (is_eval[i] ? eval_pairs : train_pairs).push_back(std::move(read[i]));
    train_rows = train_pairs.size();
    const bool kto = c.rl == "kto";
    if (kto) {
      // Each split's KL completions in runs of micro_batch_size, visited in file order (Note [KTO rows]).
      data::with_kl_completions(train_pairs, c.micro_batch_size);
      data::with_kl_completions(eval_pairs, c.micro_batch_size);
      kto_weight_advice(train_pairs, c, out);
    }
    pairs = std::make_unique<data::PairLoader>(
        std::move(train_pairs), c.micro_batch_size, static_cast<uint64_t>(c.seed), /*sequential=*/kto);
  } else {
    // With dataset_prepared_path rank 0 tokenizes and fills the cache first; the others read it.
    const bool cache_first = comm.world_size() > 1 && !c.dataset_prepared_path.empty();
    const std::string cache_wait = "waiting for rank 0 to prepare the datasets in " + c.dataset_prepared_path.string();
    if (cache_first && !comm.lead()) comm.barrier(cache_wait);
    auto samples = load_training_samples(c, tokenizer.get(), out, /*progress=*/comm.lead());
    if (cache_first && comm.lead()) comm.barrier(cache_wait);
    split = data::split_for_eval(std::move(samples), c.val_set_size, static_cast<uint64_t>(c.seed));
    train_rows = split.train.size();
    loader = std::make_unique<data::DataLoader>(
        split.train, c.micro_batch_size, c.sequence_len, c.sample_packing, static_cast<uint64_t>(c.seed), pad_id);
  }
  const int64_t batches_per_epoch = loader ? loader->batches_per_epoch() : pairs->batches_per_epoch();
  // See Note [Data-parallel steps].
  const int64_t step_batches = c.gradient_accumulation_steps * comm.world_size();
  const auto share = step_share(comm, c.gradient_accumulation_steps);
  const int64_t steps_per_epoch = std::max<int64_t>(1, (batches_per_epoch + step_batches - 1) / step_batches);
  const int64_t total = c.max_steps > 0 ? c.max_steps : steps_per_epoch * c.num_epochs;
  // See Note [Steps per epoch].
  const size_t held_out = split.eval.size() + eval_pairs.size();
  const int64_t eval_steps = held_out == 0 ? 0 : eval_interval(c.eval_steps, c.evals_per_epoch, c.num_epochs, total);
  const int64_t save_steps = save_interval(c.save_steps, c.saves_per_epoch, c.num_epochs, total, steps_per_epoch);
  const LrSchedule lr_schedule{lr_schedule_type_from_name(c.lr_scheduler),
                               c.learning_rate,
                               warmup_steps_for(c.warmup_steps, c.warmup_ratio, total),
                               total};
  std::fprintf(out,
               "data: %zu training %s, %zu held out, %lld micro-batches per epoch, %lld steps, "
               "evaluation every %lld, checkpoint every %lld (0: none)\n",
               train_rows,
               c.rl == "kto" ? "KTO rows"
               : pairs       ? "pairs"
                             : "samples",
               held_out,
               static_cast<long long>(batches_per_epoch),
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

  auto optimizer = make_optimizer(
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
  auto scheduler = std::make_unique<schedule::LayerScheduler>(lm, streamed);
  if (c.tiled_mlp) {
    const auto tiled = std::make_shared<schedule::TiledMlp>(c.tiled_mlp_num_shards);
    scheduler->tile_mlp(tiled);
    std::fprintf(out,
                 "tiled MLP: each layer's MLP in %lld chunk(s) of the %lld tokens of a micro-batch\n",
                 static_cast<long long>(tiled->shards_of(c.micro_batch_size * c.sequence_len)),
                 static_cast<long long>(c.micro_batch_size * c.sequence_len));
  }
  if (device_plan.residency.offload_activations()) {
    scheduler->offload_activations(std::make_shared<schedule::OffloadedActivations>(
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
  TrainingRun run{.options = std::move(options),
                  .device_plan = std::move(device_plan),
                  .sharded = std::move(sharded),
                  .lm = std::move(lm_ptr),
                  .vocabulary = std::move(vocabulary),
                  .lora = std::move(lora),
                  .params = params,
                  .pad_id = pad_id,
                  .split = std::move(split),
                  .loader = std::move(loader),
                  .pairs = std::move(pairs),
                  .eval_pairs = std::move(eval_pairs),
                  .counts = {step_batches, share, steps_per_epoch, total, eval_steps, save_steps},
                  .lr_schedule = lr_schedule,
                  .optimizer = std::move(optimizer),
                  .reference = nullptr,
                  .streamed = streamed,
                  .scheduler = std::move(scheduler),
                  .policy = policy,
                  .state = {}};
  if (reference_from_starting_weights(c, *run.lm)) {
    // Before a checkpoint's adapter replaces the starting one (Note [Reference adapter]).
    run.reference = std::make_unique<ReferenceWeights>(params);
    std::fprintf(
        out,
        "rl: %s's reference is the model the run starts from (%s), as TRL's \"ref\" adapter: a copy of "
        "the trainable tensors, %.1f MiB\n",
        c.rl.c_str(),
        c.lora_model_dir.empty() ? "the base and its norms" : ("the base with " + c.lora_model_dir.string()).c_str(),
        static_cast<double>(run.reference->nbytes()) / (1 << 20));
  }
  if (!resume.empty()) resume_run(run, resume, comm, out);
  return run;
}

}  // namespace qtrain::engine::train
