// See config_keys.h.
#include "engine/config/config_keys.h"

#include <algorithm>

namespace qtrain::engine::config {
namespace {

// --- the key lists ---------------------------------------------------------------------------

// The keys of RunConfig, in the order of the header, the docs and to_yaml.
const std::vector<std::string> kKeys = {
    "base_model",
    "load_in_4bit",
    "load_in_8bit",
    "bnb_4bit_quant_type",
    "bnb_4bit_use_double_quant",
    "bnb_4bit_blocksize",
    "llm_int8_threshold",
    "int8_compute",
    "adapter",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_target_linear",
    "peft_use_rslora",
    "lora_model_dir",
    "datasets",
    "sequence_len",
    "sample_packing",
    "train_on_inputs",
    "chat_template",
    "chat_template_jinja",
    "eot_tokens",
    "dataset_prepared_path",
    "val_set_size",
    "micro_batch_size",
    "gradient_accumulation_steps",
    "num_epochs",
    "max_steps",
    "learning_rate",
    "lr_scheduler",
    "warmup_steps",
    "warmup_ratio",
    "optimizer",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "weight_decay",
    "max_grad_norm",
    "gradient_checkpointing",
    "gradient_checkpointing_every_k",
    "bf16",
    "fp16",
    "device",
    "offload_layers",
    "offload_prefetch_depth",
    "gpu_memory_limit",
    "output_dir",
    "save_steps",
    "save_total_limit",
    "logging_steps",
    "eval_steps",
    "seed",
    "resume_from_checkpoint",
    "use_tensorboard",
};

// axolotl nests the bitsandbytes settings in this map; qtrain reads these keys from it as if they
// were written at the top level.
const std::vector<std::string> kBnbKwargsKeys = {
    "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "llm_int8_threshold"};

const std::vector<std::string> kDatasetKeys = {
    "path", "type", "field", "field_messages", "message_property_mappings", "roles", "roles_to_train", "train_on_eos"};

// Note [Recognised axolotl keys]
// axolotl's example configs list many keys blank (`deepspeed:`, `wandb_project:`) or false, so
// such a value is accepted: it asks for nothing. Any other value asks for a feature qtrain does
// not have, and is refused by name instead of being dropped, since dropping it would train
// something other than what the config says.
const std::vector<RefusedKey> kRefused = {
    {"deepspeed", "qtrain's multi-GPU runs do not use DeepSpeed or FSDP; remove the key"},
    {"fsdp", "qtrain's multi-GPU runs do not use DeepSpeed or FSDP; remove the key"},
    {"fsdp_config", "qtrain's multi-GPU runs do not use DeepSpeed or FSDP; remove the key"},
    {"s2_attention", "shifted-sparse attention is not implemented; remove the key"},
    {"model_type", "qtrain reads the architecture from base_model's config.json; remove the key"},
    {"tokenizer_type", "qtrain reads the tokenizer from base_model's folder; remove the key"},
    {"trust_remote_code", "qtrain runs no model code from the model folder; remove the key"},
    {"gptq", "GPTQ bases are not supported; use a float base with load_in_4bit or load_in_8bit"},
    {"quantize_moe_experts", "quantizing fused MoE experts is not supported; remove the key"},
    {"special_tokens", "qtrain uses the tokenizer's special tokens as they are; remove the key"},
    {"tokens", "adding tokens (resizing the embeddings) is not supported; remove the key"},
    {"lora_modules_to_save", "only LoRA adapters are trained; modules cannot be trained in full"},
    {"lora_fan_in_fan_out", "no supported model stores its weights transposed; remove the key"},
    {"lora_target_parameters", "LoRA on raw parameters is not supported; target modules with lora_target_modules"},
    {"lora_mlp_kernel", "qtrain's LoRA layers need no kernel switches; remove the key"},
    {"lora_qkv_kernel", "qtrain's LoRA layers need no kernel switches; remove the key"},
    {"lora_o_kernel", "qtrain's LoRA layers need no kernel switches; remove the key"},
    {"relora_steps", "ReLoRA is not supported; remove the key"},
    {"loraplus_lr_ratio", "LoRA+ is not supported (A and B share learning_rate); remove the key"},
    {"peft_use_dora", "DoRA is not supported; use plain LoRA (optionally peft_use_rslora: true)"},
    {"unfrozen_parameters", "only LoRA adapters are trained, the base stays frozen; remove the key"},
    {"activation_offloading", "activation offloading is not supported; remove the key"},
    {"layer_offloading",
     "qtrain streams layers from host RAM with its own keys: offload_layers: auto (see `qtrain plan`); remove the key"},
    {"eval_sample_packing", "qtrain has no separate packing setting for evaluation; remove the key"},
    {"group_by_length", "grouping samples by length is not supported; remove the key"},
    {"neftune_noise_alpha", "NEFTune is not supported; remove the key"},
    {"saves_per_epoch", "use save_steps"},
    {"evals_per_epoch", "use eval_steps"},
    {"save_strategy", "use save_steps"},
    {"save_safetensors", "qtrain always writes safetensors; remove the key"},
    {"auto_resume_from_checkpoints", "use resume_from_checkpoint: true"},
    {"early_stopping_patience", "early stopping is not supported; remove the key"},
    {"wandb_project", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"wandb_entity", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"wandb_name", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"wandb_watch", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"wandb_log_model", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"wandb_run_id", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"use_mlflow", "qtrain does not log to W&B or MLflow; use use_tensorboard: true"},
    {"hub_model_id", "qtrain does not upload; output_dir holds a PEFT adapter folder to upload"},
    {"hub_strategy", "qtrain does not upload; output_dir holds a PEFT adapter folder to upload"},
    {"push_to_hub", "qtrain does not upload; output_dir holds a PEFT adapter folder to upload"},
    {"push_dataset_to_hub", "qtrain does not upload; remove the key"},
    {"rl", "only supervised fine-tuning is supported (no DPO, ORPO, KTO, GRPO); remove the key"},
    {"dpo_beta", "only supervised fine-tuning is supported (no DPO, ORPO, KTO, GRPO); remove the key"},
    {"local_rank", "ranks come from the launcher, not from the config; remove the key"},
    {"debug", "remove the key"},
    {"strict", "remove the key"},
};

// Keys of a `datasets` entry that axolotl has and qtrain refuses; see Note [Recognised axolotl keys].
const std::vector<RefusedKey> kRefusedDatasetKeys = {
    {"split", "qtrain reads the whole local file; remove the key"},
    {"name", "qtrain reads local files, not Hub dataset configurations; remove the key"},
    {"data_files", "give the file itself as path"},
    {"ds_type", "qtrain reads local files; remove the key"},
    {"shards", "qtrain reads the whole local file; remove the key"},
    {"chat_template", "one template serves every dataset: set the top-level chat_template (and chat_template_jinja)"},
};

// Note [Performance hints]
// axolotl configs carry switches that pick kernels or compilers in the Python stack. They change
// speed, not what is trained, and qtrain chooses its kernels itself; so they are accepted with any
// value, and a run names them once ("accepted and ignored: ...") instead of failing on a config
// that trains the same either way. A key that would change the result is refused instead (see
// Note [Recognised axolotl keys]).
const std::vector<IgnoredKey> kIgnored = {
    {"flash_attention", "qtrain chooses its attention kernel itself"},
    {"sdp_attention", "qtrain chooses its attention kernel itself"},
    {"xformers_attention", "qtrain chooses its attention kernel itself"},
    {"flex_attention", "qtrain chooses its attention kernel itself"},
    {"attn_implementation", "qtrain chooses its attention kernel itself"},
    {"torch_compile", "qtrain is compiled C++"},
    {"torch_compile_backend", "qtrain is compiled C++"},
    {"tf32", "qtrain's float32 matmuls stay float32"},
    {"use_kernels", "qtrain chooses its kernels itself"},
    {"plugins", "axolotl plugins (Liger, cut cross-entropy) speed up the Python stack; qtrain has its own kernels"},
    {"liger_", "Liger kernels speed up the Python stack; qtrain has its own kernels", /*prefix=*/true},
    {"cut_cross_entropy", "qtrain's cross-entropy is chunked already"},
    {"gradient_checkpointing_kwargs", "qtrain's checkpointing has no reentrant variant to choose"},
    {"pad_to_sequence_len", "padding changes shapes, not the loss: padded positions carry no label"},
    {"dataloader_num_workers", "qtrain's data loading is in process"},
    {"dataloader_pin_memory", "qtrain pins batches where it copies them to a GPU"},
    {"dataloader_prefetch_factor", "qtrain's data loading is in process"},
};

}  // namespace

const std::vector<std::string>& run_config_keys() {
  return kKeys;
}

const std::vector<std::string>& bnb_kwargs_keys() {
  return kBnbKwargsKeys;
}

const std::vector<std::string>& dataset_keys() {
  return kDatasetKeys;
}

const std::vector<RefusedKey>& refused_keys() {
  return kRefused;
}

const std::vector<RefusedKey>& refused_dataset_keys() {
  return kRefusedDatasetKeys;
}

const std::vector<IgnoredKey>& ignored_keys() {
  return kIgnored;
}

const RefusedKey* find_refused(const std::vector<RefusedKey>& table, const std::string& key) {
  const auto it = std::find_if(table.begin(), table.end(), [&](const RefusedKey& r) { return key == r.key; });
  return it != table.end() ? &*it : nullptr;
}

const IgnoredKey* find_ignored(const std::string& key) {
  const auto it = std::find_if(kIgnored.begin(), kIgnored.end(), [&](const IgnoredKey& k) {
    return k.prefix ? key.starts_with(k.key) : key == k.key;
  });
  return it != kIgnored.end() ? &*it : nullptr;
}

}  // namespace qtrain::engine::config
