// A training run's settings, read from a YAML file with axolotl's key names (so that an axolotl
// QLoRA config needs few edits) plus a handful of qtrain keys, and overridden from the command
// line with `--set key=value`.
//
// Reading is strict because a silently ignored key is a run that trains something else than the
// user asked for: an unknown key is an error that suggests the nearest known one, axolotl keys
// qtrain does not implement are named as such, and values are checked for type, range and
// contradictions. Every error names the place (`file:line:col`, or the `--set` argument), the
// key, the value and the fix. docs/CONFIG.md documents every key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config_keys.h"

namespace qtrain::engine::config {

// axolotl's `type:` written as a map (type user_defined.default; its prompt_strategies/dpo and
// kto user_defined.py): the row keys that hold the prompt, the system text, the completions and
// KTO's label, and Python format strings of the texts ("": the field's text as it is). See
// Note [User-defined type] in engine/data/user_defined_type.h.
struct UserDefinedType {
  std::string field_prompt = "prompt";
  std::string field_system = "system";
  std::string field_chosen = "chosen";
  std::string field_rejected = "rejected";
  std::string field_completion = "completion";
  std::string field_label = "label";
  std::string prompt_format;
  std::string chosen_format;
  std::string rejected_format;
  std::string completion_format;

  bool operator==(const UserDefinedType&) const = default;
};

// One entry of `datasets`.
struct DatasetConfig {
  // A local dataset file (not a Hugging Face Hub id). Resolved against the config's directory.
  std::filesystem::path path;
  // "completion", "alpaca", "input_output", "chat_template" or "pretokenized"; "" (key absent):
  // rows are used as pre-tokenized when they carry input_ids.
  std::string type;
  // The rows used (engine/config/dataset_split.h): "" or "train" every row, "train[:10%]" a slice;
  // checked when the config is read.
  std::string split;
  // type completion: the field of each row that holds the text.
  std::string field = "text";

  // type chat_template (axolotl's keys and defaults; see docs/DATA.md "Datasets and labels").
  std::string field_messages = "messages";
  // message_property_mappings: the keys of a message that hold its role and its content.
  std::string message_role = "role";
  std::string message_content = "content";
  // The other entries of message_property_mappings (template key -> message key), and
  // reasoning_content -> field_thinking when message_property_mappings is not given. Message keys
  // mapped nowhere reach the template under their own names.
  std::map<std::string, std::string> message_properties;
  // The row key that holds the template's tools.
  std::string field_tools = "tools";
  // message_field_training / message_field_training_detail: the message keys that hold a turn's
  // train flag and its character ranges ({begin_offset, end_offset (inclusive), train}); "": not
  // read.
  std::string message_field_training;
  std::string message_field_training_detail;
  // The chat_template.* preference types: the row keys of the chosen and rejected completions.
  std::string field_chosen = "chosen";
  std::string field_rejected = "rejected";
  // type user_defined.default: the keys of its map.
  UserDefinedType user_defined;
  // Drop a leading system turn (after the row's "system" key is prepended).
  bool drop_system_message = false;
  // roles: source role -> template role, on top of the built-in human -> user, gpt -> assistant.
  std::map<std::string, std::string> roles;
  std::vector<std::string> roles_to_train = {"assistant"};
  // train_on_eos: "turn" (the EOT/EOS after each trained turn), "all" (after every turn),
  // "last" (after the last turn only) or "none".
  std::string train_on_eos = "turn";
  // train_on_eot: the same choices for the eot_tokens; "" (key absent): as train_on_eos.
  std::string train_on_eot;
  // The dataset's own chat_template and chat_template_jinja (engine/config/chat_template_choice.h),
  // as written; "" (keys absent): the top-level ones apply.
  std::string chat_template;
  std::string chat_template_jinja;
  // What the dataset's (or else the top-level) chat_template means. chat_template_source: the
  // Jinja text of `chat_template: jinja` (read from chat_template_jinja) or of a named template;
  // "" for the tokenizer's. chat_template_fallback: the named template of
  // tokenizer_default_fallback_<name>, used when the tokenizer has none.
  std::string chat_template_source;
  std::string chat_template_fallback;
  // Top-level eot_tokens; empty: [the tokenizer's eos_token].
  std::vector<std::string> eot_tokens;
  // Top-level excess_length_strategy: "drop", "truncate" or "raise" for samples longer than
  // sequence_len.
  std::string excess_length_strategy = "drop";

  bool operator==(const DatasetConfig&) const = default;
};

// axolotl's `special_tokens:` map: tokens that take over a role (e.g. Llama 3's
// `pad_token: <|end_of_text|>`). "" leaves the tokenizer's own. A token the tokenizer lacks is
// added where the run loads the tokenizer (engine/data/special_tokens.h), whose errors name
// `place`.
struct SpecialTokens {
  std::string bos_token;
  std::string eos_token;
  std::string pad_token;
  std::string unk_token;
  // Where the map was written (file:line:col or the --set argument); not part of the value.
  std::string place;

  bool empty() const { return bos_token.empty() && eos_token.empty() && pad_token.empty() && unk_token.empty(); }
  bool operator==(const SpecialTokens& o) const {
    return bos_token == o.bos_token && eos_token == o.eos_token && pad_token == o.pad_token && unk_token == o.unk_token;
  }
};

// axolotl's `gradient_checkpointing: true | false`, plus qtrain's "every_kth".
enum class GradientCheckpointing { off, every_layer, every_kth };
// axolotl's `bf16: true | false | auto` (auto: bf16 where the device supports it).
enum class Bf16 { off, on, automatic };

// Field names are the YAML keys. Defaults are those of a file that omits the key; "(qtrain)"
// marks keys that axolotl does not have. Relative paths are resolved against the directory of
// the config file (also those given with --set), so a config runs the same from any directory.
struct RunConfig {
  // --- base model and its quantization ---
  // A local Hugging Face model folder (config.json + safetensors). Required.
  std::filesystem::path base_model;
  // Quantize the base's linear weights to 4 bits (NF4/FP4) on load: QLoRA.
  bool load_in_4bit = false;
  // Quantize the base's linear weights to LLM.int8() on load.
  bool load_in_8bit = false;
  // 4-bit code book: "nf4" or "fp4".
  std::string bnb_4bit_quant_type = "nf4";
  // Quantize the 4-bit absmax values again (8-bit, blocks of 256): 0.37 fewer bits per weight.
  bool bnb_4bit_use_double_quant = true;
  // (qtrain) Weights per 4-bit absmax block: a power of 2 in [32, 4096].
  int64_t bnb_4bit_blocksize = 64;
  // Outlier threshold of llm_int8 compute: activation columns with |x| >= it stay in float.
  double llm_int8_threshold = 6.0;
  // (qtrain) How an 8-bit linear computes: "dequantize" (W in the activation dtype, a float
  // matmul; the most accurate) or "llm_int8" (int8 matmul with outlier decomposition).
  std::string int8_compute = "dequantize";
  // Quantize the routed experts of MoE layers (per expert, as load_in_4bit / load_in_8bit say);
  // false keeps them in the compute dtype. Routers are never quantized.
  bool quantize_moe_experts = true;
  // axolotl's model_config map: values that replace those of the model's config.json. qtrain
  // reads the two of the load-balancing loss of Qwen3-MoE and Mixtral (docs/MODELS.md); unset:
  // config.json's.
  std::optional<bool> output_router_logits;
  std::optional<double> router_aux_loss_coef;

  // --- LoRA ---
  // "qlora" (LoRA on a 4-bit base; requires load_in_4bit) or "lora". Default: "qlora" when
  // load_in_4bit, else "lora". qtrain trains adapters only, so there is no blank (full) mode.
  std::string adapter = "lora";
  int64_t lora_r = 8;
  double lora_alpha = 16;
  // In [0, 1).
  double lora_dropout = 0.0;
  // Module names or dotted suffixes ("q_proj", "self_attn.o_proj"), from a list.
  std::vector<std::string> lora_target_modules;
  // lora_target_modules given as one string: a regular expression a module's whole name must
  // match, as PEFT reads a string target_modules. Empty: none.
  std::string lora_target_modules_regex;
  // Target every linear layer except lm_head (PEFT's "all-linear").
  bool lora_target_linear = false;
  // PEFT's target_parameters: MoE expert parameters, e.g. [mlp.experts.gate_up_proj,
  // mlp.experts.down_proj]; needs lora_dropout 0.
  std::vector<std::string> lora_target_parameters;
  // PEFT's modules_to_save: embed_tokens and / or lm_head trained in full beside the adapters
  // (Note [Modules trained in full] in engine/model/saved_modules.h).
  std::vector<std::string> lora_modules_to_save;
  // axolotl's unfrozen_parameters: regular expressions of base parameters to train in full
  // (Note [Unfrozen parameters] in engine/model/unfrozen_parameters.h).
  std::vector<std::string> unfrozen_parameters;
  // Scale by alpha / sqrt(r) instead of alpha / r.
  bool peft_use_rslora = false;
  // DoRA (PEFT's use_dora): Note [DoRA] in engine/lora/lora_linear.h.
  bool peft_use_dora = false;
  // PEFT's rank_pattern / alpha_pattern: regular expressions of module names (or of
  // "<module>.<parameter>" for lora_target_parameters) to their own rank / alpha, in the order
  // written; the first that matches the end of a name wins (lora::LoraConfig).
  std::vector<std::pair<std::string, int64_t>> lora_rank_pattern;
  std::vector<std::pair<std::string, double>> lora_alpha_pattern;
  // A PEFT adapter folder to start from; empty: fresh adapters.
  std::filesystem::path lora_model_dir;

  // --- data ---
  std::vector<DatasetConfig> datasets;
  // Maximum tokens per sample (per packed sequence with sample_packing).
  int64_t sequence_len = 2048;
  // Pack several samples into one sequence of sequence_len (attention does not cross samples).
  bool sample_packing = false;
  // Also compute the loss on the prompt part of a sample (alpaca: instruction and input).
  bool train_on_inputs = false;
  // Chat datasets: "tokenizer_default" (the template in tokenizer_config.json), "jinja" (the
  // template in chat_template_jinja: inline Jinja text or the path of a .jinja file), one of
  // axolotl's template names (engine/text/named_chat_template.h) or
  // "tokenizer_default_fallback_<name>" (the tokenizer's template, else the named one).
  std::string chat_template = "tokenizer_default";
  std::string chat_template_jinja;
  // The tokens that end a turn, trained after a trained turn per train_on_eot; empty: eos_token.
  std::vector<std::string> eot_tokens;
  SpecialTokens special_tokens;
  // axolotl's `tokens:`: tokens added to the tokenizer, after special_tokens' new ones (Note [New
  // tokens] in engine/data/special_tokens.h).
  std::vector<std::string> tokens;
  // When tokens were added: the embeddings grow to a multiple of 32 rows.
  bool resize_token_embeddings_to_32x = false;
  // New embedding rows drawn from the old rows' mean and covariance (transformers' mean_resizing)
  // instead of normal(0, initializer_range) (axolotl's default); Note [Resized embeddings].
  bool mean_resizing_embeddings = false;
  // Embeddings with more rows than the tokenizer has tokens are cut to that many.
  bool shrink_embeddings = false;
  // Samples longer than sequence_len: "drop" (axolotl's default), "truncate" or "raise".
  std::string excess_length_strategy = "drop";
  // A folder that caches tokenized datasets (See Note [Prepared dataset cache]); empty: none.
  std::filesystem::path dataset_prepared_path;
  // Threads that tokenize dataset rows; 0: one per core (axolotl: os.cpu_count()). Does not change
  // the samples.
  int64_t dataset_processes = 0;
  // Held-out rows for evaluation: a fraction in [0, 1) when below 1, else a whole number of
  // rows. 0: no evaluation set.
  double val_set_size = 0.0;

  // --- optimisation ---
  // Samples per forward pass.
  int64_t micro_batch_size = 1;
  // Micro-batches per optimizer step.
  int64_t gradient_accumulation_steps = 1;
  int64_t num_epochs = 1;
  // Optimizer steps of the run; -1: as many as num_epochs take. Wins over num_epochs when set.
  int64_t max_steps = -1;
  double learning_rate = 2e-4;
  // "constant", "linear" (to 0) or "cosine" (to 0), after the warmup.
  std::string lr_scheduler = "cosine";
  // Linear warmup from 0 over this many steps, or over this fraction of the run; not both.
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  // "adamw_torch" (also read from adamw, adamw_torch_fused, paged_adamw_32bit): torch's AdamW with
  // decoupled weight decay and float32 state; "adamw_bnb_8bit" (also read from adamw_8bit,
  // paged_adamw_8bit and torchao's adamw_torch_8bit and adamw_torch_4bit): bitsandbytes' AdamW8bit,
  // 8-bit blockwise state (engine/train/adamw_8bit.h).
  std::string optimizer = "adamw_torch";
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double weight_decay = 0.0;
  // LoRA+ (peft's create_loraplus_optimizer): lora_B trains at loraplus_lr_ratio times the
  // learning rate of everything else; absent: one rate for all. loraplus_lr_embedding is the rate
  // of LoRA on embedding layers, which qtrain does not have: read, and without effect.
  std::optional<double> loraplus_lr_ratio;
  std::optional<double> loraplus_lr_embedding;
  // Clip the gradient's global L2 norm to this; 0: no clipping.
  double max_grad_norm = 1.0;

  // Preference tuning (engine/train/preference_loss.h): "dpo", "ipo", "orpo", "simpo" or "kto", as
  // TRL computes them; empty: supervised fine-tuning. rl_beta is TRL's beta (DPO's, IPO's, SimPO's,
  // KTO's), orpo_alpha ORPO's; simpo_gamma and cpo_alpha are CPOTrainer's; the kto_ weights are
  // KTOTrainer's desirable_weight and undesirable_weight.
  std::string rl;
  double rl_beta = 0.1;
  double orpo_alpha = 0.1;
  double simpo_gamma = 0.5;
  double cpo_alpha = 1.0;
  double kto_desirable_weight = 1.0;
  double kto_undesirable_weight = 1.0;
  // KTOTrainer's loss_type: "kto" or "apo_zero_unpaired".
  std::string kto_loss_type = "kto";
  // rl: dpo's losses, TRL's loss_type and loss_weights (empty: sigmoid, weight 1 each; see
  // dpo_losses), label_smoothing and discopop_tau.
  std::vector<std::string> dpo_loss_type;
  std::vector<double> dpo_loss_weights;
  double dpo_label_smoothing = 0.0;
  double discopop_tau = 0.05;
  // DPOTrainer's f_divergence_type and f_alpha_divergence_coef (f-DPO), ld_alpha (LD-DPO; unset:
  // none) and use_weighting (WPO; axolotl's dpo_use_weighting), for rl: dpo and ipo.
  std::string f_divergence_type = "reverse_kl";
  double f_alpha_divergence_coef = 0.5;
  std::optional<double> ld_alpha;
  bool dpo_use_weighting = false;
  // DPO's, IPO's and KTO's reference computed once before training, this many pairs (KTO: rows) at a
  // time (0: micro_batch_size).
  bool precompute_ref_log_probs = false;
  int64_t precompute_ref_batch_size = 0;

  // --- memory, precision, device ---
  // Recompute layers in backward instead of keeping their activations.
  GradientCheckpointing gradient_checkpointing = GradientCheckpointing::every_layer;
  // (qtrain) With gradient_checkpointing: every_kth, every k-th layer is checkpointed.
  int64_t gradient_checkpointing_every_k = 1;
  // (axolotl) The inputs checkpointed layers keep for their recompute wait in host memory (pinned
  // on a GPU) instead of device memory (engine/schedule/offloaded_activations.h). axolotl's true,
  // legacy and hidden_states, and gradient_checkpointing: offload; needs gradient checkpointing.
  bool activation_offloading = false;
  // (axolotl) Each layer's dense MLP runs forward and backward in chunks of tokens
  // (engine/schedule/tiled_mlp.h): tiled_mlp_num_shards chunks, or with 0 chunks of at most 4,096
  // tokens (axolotl's default aims at 32,768 for its MoE kernel's speed).
  bool tiled_mlp = false;
  int64_t tiled_mlp_num_shards = 0;
  // Compute dtype of activations and adapters; neither: float32.
  Bf16 bf16 = Bf16::off;
  bool fp16 = false;
  // (qtrain) "auto" (CUDA when available, else CPU), "cpu", "cuda" or "cuda:N".
  std::string device = "auto";
  // (qtrain) Decoder layers whose quantized weights live in pinned host RAM and are copied to the
  // GPU for each use. `offload_layers: auto` sets offload_layers_auto: as few layers as make the
  // step fit gpu_memory_limit, by the plan `qtrain plan` prints (offload_layers is then 0).
  int64_t offload_layers = 0;
  bool offload_layers_auto = false;
  // (qtrain) Offloaded layers copied ahead of the compute (device slots: one more than this).
  int64_t offload_prefetch_depth = 1;
  // Device memory the run may use, in bytes; written as 20GiB, 24GB, 512MiB, or a bare number of
  // GiB. 0: the whole device.
  int64_t gpu_memory_limit = 0;

  // --- output, logging, resume ---
  // Where checkpoints, the adapter, logs and the resolved config go. Resolved like base_model.
  std::filesystem::path output_dir = "./outputs";
  // Save a checkpoint every this many steps; 0: only at the end.
  int64_t save_steps = 0;
  // Instead of save_steps: this many saves per epoch, as axolotl derives its save_steps; see
  // Note [Steps per epoch] (engine/train/step_intervals.h). 0: unset.
  int64_t saves_per_epoch = 0;
  // Keep only the newest this many checkpoints; 0: keep all.
  int64_t save_total_limit = 0;
  int64_t logging_steps = 1;
  // Stop the run (saving a checkpoint) once the loss has been above the threshold for `patience`
  // steps in a row, as axolotl's LossWatchDogCallback does; 0: no watchdog.
  double loss_watchdog_threshold = 0.0;
  int64_t loss_watchdog_patience = 3;
  // Evaluate on the val_set_size rows every this many steps; 0: never.
  int64_t eval_steps = 0;
  // Instead of eval_steps: this many evaluations per epoch; see Note [Steps per epoch]. 0: unset.
  int64_t evals_per_epoch = 0;
  int64_t seed = 42;
  // Continue from this checkpoint folder; empty: start fresh.
  std::filesystem::path resume_from_checkpoint;
  // `resume_from_checkpoint: true`: continue from the newest checkpoint in output_dir (none is an
  // error).
  bool resume_from_latest_checkpoint = false;
  // axolotl's: continue from the newest checkpoint in output_dir if there is one.
  bool auto_resume_from_checkpoints = false;
  // Hugging Face's: a run that does not continue the one in output_dir deletes that run's files
  // (checkpoints, adapter, metrics) instead of refusing to start (engine/train/output_dir.h).
  bool overwrite_output_dir = false;
  // Also write TensorBoard event files.
  bool use_tensorboard = false;

  // --- multi-process runs (docs/DISTRIBUTED.md) ---
  // Seconds a rank waits for the others at the rendezvous and in each collective before it stops
  // with an error (axolotl's and transformers' key and default).
  int64_t ddp_timeout = 1800;
  // The c10d backend of a multi-process run (transformers' key): auto takes NCCL when the device is
  // a GPU and Gloo otherwise; gloo on a GPU stages every collective through host memory.
  std::string ddp_backend = "auto";
  // shard_base (or axolotl's fsdp): each rank keeps 1/world_size of the base's layers and gathers
  // a layer before it computes (engine/dist/sharded_base.h).
  bool shard_base = false;

  // Not a key: the axolotl settings of this config that change speed, not what is trained, and
  // that qtrain therefore accepts and ignores, each as "key (why)". Commands print them once
  // (ignored_keys_note). to_yaml does not write them.
  std::vector<std::string> ignored_keys;
  // Not a key: settings that run, as transformers and axolotl run them, but likely not as meant,
  // each a sentence that starts with where it was written. Commands print each as a warning.
  std::vector<std::string> warnings;

  bool operator==(const RunConfig&) const = default;
};

// Reads `file` and applies `overrides` ("key=value" strings from --set, in order; a later one
// wins). `value` is YAML: `lora_r=16`, `lora_target_modules=[q_proj,v_proj]`,
// `datasets=[{path: data.jsonl}]`. Any problem is a c10::Error (see the file comment).
RunConfig load_run_config(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});

// The same from text: `source_name` names it in messages; relative paths resolve against
// `base_dir`.
RunConfig parse_run_config(const std::string& yaml_text,
                           const std::string& source_name,
                           const std::filesystem::path& base_dir,
                           const std::vector<std::string>& overrides = {});

// rl: dpo's and ipo's losses by TRL's names with their weights: dpo_loss_type and
// dpo_loss_weights, or what rl names (sigmoid, or ipo) with weight 1.
std::vector<std::pair<std::string, double>> dpo_losses(const RunConfig& config);

// One line naming config.ignored_keys, or "" when there are none.
std::string ignored_keys_note(const RunConfig& config);

// Every key of `config`, one per line in the order of run_config_keys(), in a form that
// parse_run_config reads back to an equal RunConfig (paths as they are: absolute after a load).
// Saved beside checkpoints so that a run's settings are on record.
std::string to_yaml(const RunConfig& config);

}  // namespace qtrain::engine::config
