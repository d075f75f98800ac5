// See config_keys.h.
#include "engine/config/config_keys.h"

#include <algorithm>
#include <string_view>

#include "engine/config/run_config_table.h"

namespace qtrain::engine::config {
namespace {

// --- the key lists ---------------------------------------------------------------------------

// See folded_keys() in config_keys.h.
const std::vector<std::string> kFoldedKeys = {"fsdp", "fsdp_config", "fsdp_version", "overrides_of_model_config"};

// axolotl nests the bitsandbytes settings in this map; qtrain reads these keys from it as if they
// were written at the top level.
const std::vector<std::string> kBnbKwargsKeys = {
    "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "llm_int8_threshold"};

const std::vector<std::string> kChatDatasetKeys = {"field_messages",
                                                   "message_property_mappings",
                                                   "message_field_role",
                                                   "message_field_content",
                                                   "message_field_training",
                                                   "message_field_training_detail",
                                                   "field_thinking",
                                                   "field_tools",
                                                   "roles",
                                                   "roles_to_train",
                                                   "train_on_eos",
                                                   "train_on_eot",
                                                   "drop_system_message",
                                                   "chat_template",
                                                   "chat_template_jinja"};

const std::vector<std::string> kPreferenceDatasetKeys = {"field_chosen", "field_rejected"};

// The keys of a `type:` map (type user_defined.default; config::UserDefinedType).
const std::vector<std::string> kUserDefinedTypeKeys = {"field_prompt",
                                                       "field_system",
                                                       "field_chosen",
                                                       "field_rejected",
                                                       "field_completion",
                                                       "field_label",
                                                       "prompt_format",
                                                       "chosen_format",
                                                       "rejected_format",
                                                       "completion_format"};

const std::vector<std::string> kPreferenceDatasetTypes = {"chat_template.argilla_chat",
                                                          "chat_template.default",
                                                          "chatml.argilla",
                                                          "chatml.argilla_chat",
                                                          "chatml.icr",
                                                          "chatml.intel",
                                                          "chatml.prompt_pairs",
                                                          "chatml.ultra",
                                                          "llama3.argilla",
                                                          "llama3.argilla_chat",
                                                          "llama3.default",
                                                          "llama3.icr",
                                                          "llama3.intel",
                                                          "llama3.prompt_pairs",
                                                          "llama3.ultra",
                                                          "user_defined.default"};

const std::vector<std::string> kDatasetKeys = [] {
  std::vector<std::string> keys = {"path", "type", "ds_type", "split", "field"};
  keys.insert(keys.end(), kChatDatasetKeys.begin(), kChatDatasetKeys.end());
  keys.insert(keys.end(), kPreferenceDatasetKeys.begin(), kPreferenceDatasetKeys.end());
  return keys;
}();

// Note [Recognised axolotl keys]
// axolotl's example configs list many keys blank (`deepspeed:`, `wandb_project:`) or false, so
// such a value is accepted: it asks for nothing. Any other value asks for a feature qtrain does
// not have, and is refused by name instead of being dropped, since dropping it would train
// something other than what the config says.
const std::vector<RefusedKey> kRefused = {
    {"deepspeed", "qtrain's multi-GPU runs do not use DeepSpeed or FSDP; remove the key"},
    {"s2_attention", "shifted-sparse attention is not implemented; remove the key"},
    {"gptq", "GPTQ bases are not supported; use a float base with load_in_4bit or load_in_8bit"},
    {"lora_fan_in_fan_out", "no supported model stores its weights transposed; remove the key"},
    {"relora_steps", "ReLoRA is not supported; remove the key"},
    {"layer_offloading",
     "qtrain streams layers from host RAM with its own keys: offload_layers: auto (see `qtrain plan`); remove the key"},
    {"group_by_length", "grouping samples by length is not supported; remove the key"},
    {"dataset_num_proc",
     "qtrain reads the tokenizing threads as dataset_processes (axolotl's older name); rename the key"},
    {"neftune_noise_alpha", "NEFTune is not supported; remove the key"},
    {"save_strategy", "use save_steps"},
    {"save_safetensors", "qtrain always writes safetensors; remove the key"},
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
    {"dpo_beta", "axolotl's older name of rl_beta; write rl_beta"},
    {"dpo_norm_loss",
     "it length-normalised DPO through a TRL internal that TRL 1.16 no longer has; write dpo_loss_type: "
     "[sigmoid_norm] (TRL 1.16's DPO on per-token log-ratios)"},
    {"rpo_alpha",
     "TRL 1.16 has RPO as a sum of losses; write dpo_loss_type: [sigmoid, sft] with dpo_loss_weights: [1, "
     "<rpo_alpha>]"},
    {"local_rank", "ranks come from the launcher, not from the config; remove the key"},
    {"debug", "remove the key"},
    {"strict", "remove the key"},
};

// Keys of a `datasets` entry that axolotl has and qtrain refuses; see Note [Recognised axolotl keys].
const std::vector<RefusedKey> kRefusedDatasetKeys = {
    {"name", "qtrain reads local files, not Hub dataset configurations; remove the key"},
    {"data_files", "give each local file as the path of its own datasets entry"},
    {"field_system",
     "type chat_template reads a row's top-level \"system\" as the system turn, as axolotl's does (it ignores "
     "field_system); rename that field to system"},
    {"split_thinking", "splitting <think> blocks out of the content is not supported; give reasoning_content"},
    {"template_thinking_key", "the template reads reasoning_content; map the message key with field_thinking"},
    {"shards", "qtrain reads the whole local file; remove the key"},
};

// Note [Performance hints]
// axolotl configs carry switches that pick kernels, compilers or multi-GPU sharding in the Python
// stack, and names of the classes axolotl loads with. They do not change what is trained, and
// qtrain chooses its kernels and weight placement itself; so they are accepted with any value,
// and a run names them once ("accepted and ignored: ...") instead of failing on a config that
// trains the same either way. A `default_value` (AutoModelForCausalLM) asks for what qtrain does
// and is not named. A key that would change the result is refused instead (see Note [Recognised
// axolotl keys]).
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
    {"tiled_mlp_use_original_mlp",
     "it chooses between the model's MLP and Liger's inside tiling; qtrain tiles its own MLP"},
    {"gradient_checkpointing_kwargs", "qtrain's checkpointing has no reentrant variant to choose"},
    {"pad_to_sequence_len", "padding changes shapes, not the loss: padded positions carry no label"},
    {"dataloader_num_workers", "qtrain's data loading is in process"},
    {"dataloader_prefetch_factor", "qtrain's data loading is in process"},
    {"dataloader_pin_memory", "qtrain pins batches where it copies them to a GPU"},
    {"lora_mlp_kernel", "qtrain's LoRA layers pick their kernels themselves"},
    {"lora_qkv_kernel", "qtrain's LoRA layers pick their kernels themselves"},
    {"lora_o_kernel", "qtrain's LoRA layers pick their kernels themselves"},
    {"fused_attn_kernel", "qtrain chooses its attention kernel itself"},
    {"gemma4_hybrid_attn_impl",
     "it gives Gemma 4's sliding layers flash attention and its 512-wide global layers SDPA; qtrain chooses each "
     "layer's attention kernel itself"},
    {"use_scattermoe", "ScatterMoE speeds up the Python stack's experts; qtrain runs its own grouped expert kernel"},
    {"experts_implementation",
     "it chooses the Python stack's expert kernel; qtrain runs its own grouped expert kernel"},
    {"eval_sample_packing", "evaluation batches are not packed; training is the same"},
    {"eval_table_size", "it logs sample generations to Weights & Biases at evaluation; qtrain does not report there"},
    {"eval_max_new_tokens", "the length of eval_table_size's generations, which qtrain does not make"},
    {"remove_unused_columns",
     "the HF Trainer's filter of dataset columns; qtrain reads only the fields a row type names"},
    {"dpo_padding_free", "TRL 1.16 ignores it too (it pads, with a warning); pairs are not packed"},
    {"dpo_use_logits_to_keep", "qtrain computes the completions' log-probabilities in chunks already"},
    {"dpo_use_liger_kernel", "Liger's DPO loss speeds up the Python stack; qtrain has its own kernels"},
    {"dpo_generate_during_eval", "it logs sample generations to Weights & Biases; qtrain does not report there"},
    {"ddp_find_unused_parameters", "a DDP setting; qtrain's LoRA parameters all take part in every step"},
    {"trust_remote_code", "qtrain runs no code from the model folder; its architectures are built in"},
    // The class or tokenizer axolotl loads with: qtrain builds the model config.json names and reads
    // tokenizer.json, so the Auto classes are what it does already and any other name is noted.
    {"model_type", "qtrain builds the architecture config.json names", false, "AutoModelForCausalLM"},
    {"tokenizer_type", "qtrain reads tokenizer.json (the fast tokenizer)", false, "AutoTokenizer"},
};

}  // namespace

const std::vector<std::string>& folded_keys() {
  return kFoldedKeys;
}

const std::vector<std::string>& run_config_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> names;
    for (const auto& key : run_config_table()) names.push_back(key.name);
    return names;
  }();
  return keys;
}

const std::vector<std::string>& bnb_kwargs_keys() {
  return kBnbKwargsKeys;
}

const std::vector<std::string>& dataset_keys() {
  return kDatasetKeys;
}

const std::vector<std::string>& preference_dataset_keys() {
  return kPreferenceDatasetKeys;
}

const std::vector<std::string>& user_defined_type_keys() {
  return kUserDefinedTypeKeys;
}

const std::vector<std::string>& preference_dataset_types() {
  return kPreferenceDatasetTypes;
}

const std::vector<std::string>& chat_dataset_keys() {
  return kChatDatasetKeys;
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

std::string refused_keys_table(const std::vector<RefusedKey>& table) {
  std::string out = "| Key | Fix in the message |\n|---|---|\n";
  for (const RefusedKey& k : table) out += "| `" + std::string(k.key) + "` | " + k.fix + " |\n";
  return out;
}

std::string ignored_keys_table() {
  std::string out = "| Key | Why qtrain can ignore it |\n|---|---|\n";
  const auto& table = ignored_keys();
  for (size_t i = 0; i < table.size();) {
    std::string keys;
    size_t j = i;
    for (; j < table.size() && std::string_view(table[j].why) == table[i].why; ++j) {
      keys += (j == i ? "`" : ", `") + std::string(table[j].key) +
              (table[j].prefix ? "*` (every key that starts so)" : "`");
      if (table[j].default_value) keys += std::string(" (silent for `") + table[j].default_value + "`)";
    }
    out += "| " + keys + " | " + table[i].why + " |\n";
    i = j;
  }
  return out;
}

}  // namespace qtrain::engine::config
