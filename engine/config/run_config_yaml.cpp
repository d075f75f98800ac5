// Writing a RunConfig back as YAML (to_yaml): every key resolved, in the order of the header and
// docs/CONFIG.md, in a form that parse_run_config reads back to the same config.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/byte_size.h"
#include "engine/config/run_config.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {
namespace {

// A YAML double-quoted string: the one form that never reads back as a number, bool or null.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string boolean_text(bool v) {
  return v ? "true" : "false";
}

}  // namespace

std::string to_yaml(const RunConfig& c) {
  std::ostringstream out;
  const auto line = [&](const char* key, const std::string& value) { out << key << ": " << value << "\n"; };
  out << "# qtrain run config with every key resolved (docs/CONFIG.md)\n";
  line("base_model", quoted(c.base_model.string()));
  line("load_in_4bit", boolean_text(c.load_in_4bit));
  line("load_in_8bit", boolean_text(c.load_in_8bit));
  line("bnb_4bit_quant_type", c.bnb_4bit_quant_type);
  line("bnb_4bit_use_double_quant", boolean_text(c.bnb_4bit_use_double_quant));
  line("bnb_4bit_blocksize", std::to_string(c.bnb_4bit_blocksize));
  line("llm_int8_threshold", format_double(c.llm_int8_threshold));
  line("int8_compute", c.int8_compute);
  line("quantize_moe_experts", boolean_text(c.quantize_moe_experts));
  std::vector<std::string> model_config;
  if (c.output_router_logits) model_config.push_back("output_router_logits: " + boolean_text(*c.output_router_logits));
  if (c.router_aux_loss_coef) model_config.push_back("router_aux_loss_coef: " + format_double(*c.router_aux_loss_coef));
  line("model_config", "{" + join(model_config, ", ") + "}");
  line("adapter", c.adapter);
  line("lora_r", std::to_string(c.lora_r));
  line("lora_alpha", format_double(c.lora_alpha));
  line("lora_dropout", format_double(c.lora_dropout));
  std::vector<std::string> modules;
  for (const std::string& m : c.lora_target_modules) {
    modules.push_back(quoted(m));
  }
  line("lora_target_modules",
       c.lora_target_modules_regex.empty() ? "[" + join(modules, ", ") + "]" : quoted(c.lora_target_modules_regex));
  line("lora_target_linear", boolean_text(c.lora_target_linear));
  std::vector<std::string> params;
  for (const std::string& p : c.lora_target_parameters) {
    params.push_back(quoted(p));
  }
  line("lora_target_parameters", "[" + join(params, ", ") + "]");
  std::vector<std::string> saved;
  for (const std::string& m : c.lora_modules_to_save) saved.push_back(quoted(m));
  line("lora_modules_to_save", "[" + join(saved, ", ") + "]");
  std::vector<std::string> unfrozen;
  for (const std::string& p : c.unfrozen_parameters) unfrozen.push_back(quoted(p));
  line("unfrozen_parameters", "[" + join(unfrozen, ", ") + "]");
  line("peft_use_rslora", boolean_text(c.peft_use_rslora));
  line("peft_use_dora", boolean_text(c.peft_use_dora));
  std::vector<std::string> ranks, alphas;
  for (const auto& [pattern, rank] : c.lora_rank_pattern)
    ranks.push_back(quoted(pattern) + ": " + std::to_string(rank));
  for (const auto& [pattern, alpha] : c.lora_alpha_pattern)
    alphas.push_back(quoted(pattern) + ": " + format_double(alpha));
  line("lora_rank_pattern", "{" + join(ranks, ", ") + "}");
  line("lora_alpha_pattern", "{" + join(alphas, ", ") + "}");
  line("lora_model_dir", quoted(c.lora_model_dir.string()));
  if (c.datasets.empty()) {
    line("datasets", "[]");
  } else {
    out << "datasets:\n";
    for (const DatasetConfig& d : c.datasets) {
      out << "  - path: " << quoted(d.path.string()) << "\n";
      if (!d.type.empty()) {
        out << "    type: " << d.type << "\n";
      }
      if (!d.split.empty()) out << "    split: " << quoted(d.split) << "\n";
      if (d.type == "completion") {
        out << "    field: " << quoted(d.field) << "\n";
      }
      if (d.type == "chat_template") {
        std::vector<std::string> trained;
        for (const std::string& role : d.roles_to_train) trained.push_back(quoted(role));
        out << "    field_messages: " << quoted(d.field_messages) << "\n";
        out << "    message_property_mappings: {role: " << quoted(d.message_role)
            << ", content: " << quoted(d.message_content);
        for (const auto& [key, source] : d.message_properties) out << ", " << key << ": " << quoted(source);
        out << "}\n";
        if (!d.roles.empty()) {
          out << "    roles:\n";
          for (const auto& [source, role] : d.roles)
            out << "      " << quoted(role) << ": [" << quoted(source) << "]\n";
        }
        out << "    roles_to_train: [" << join(trained, ", ") << "]\n";
        out << "    train_on_eos: " << d.train_on_eos << "\n";
        if (!d.train_on_eot.empty()) out << "    train_on_eot: " << d.train_on_eot << "\n";
        if (!d.message_field_training.empty()) {
          out << "    message_field_training: " << quoted(d.message_field_training) << "\n";
        }
        if (!d.message_field_training_detail.empty()) {
          out << "    message_field_training_detail: " << quoted(d.message_field_training_detail) << "\n";
        }
        out << "    field_tools: " << quoted(d.field_tools) << "\n";
        out << "    drop_system_message: " << boolean_text(d.drop_system_message) << "\n";
        if (!d.chat_template.empty()) out << "    chat_template: " << d.chat_template << "\n";
        if (!d.chat_template_jinja.empty()) out << "    chat_template_jinja: " << quoted(d.chat_template_jinja) << "\n";
      }
    }
  }
  line("sequence_len", std::to_string(c.sequence_len));
  line("sample_packing", boolean_text(c.sample_packing));
  line("train_on_inputs", boolean_text(c.train_on_inputs));
  line("chat_template", c.chat_template);
  line("chat_template_jinja", quoted(c.chat_template_jinja));
  std::vector<std::string> eot;
  for (const std::string& token : c.eot_tokens) eot.push_back(quoted(token));
  line("eot_tokens", "[" + join(eot, ", ") + "]");
  out << "special_tokens: {bos_token: " << quoted(c.special_tokens.bos_token)
      << ", eos_token: " << quoted(c.special_tokens.eos_token) << ", pad_token: " << quoted(c.special_tokens.pad_token)
      << ", unk_token: " << quoted(c.special_tokens.unk_token) << "}\n";
  std::vector<std::string> tokens;
  for (const std::string& token : c.tokens) tokens.push_back(quoted(token));
  line("tokens", "[" + join(tokens, ", ") + "]");
  line("resize_token_embeddings_to_32x", boolean_text(c.resize_token_embeddings_to_32x));
  line("mean_resizing_embeddings", boolean_text(c.mean_resizing_embeddings));
  line("shrink_embeddings", boolean_text(c.shrink_embeddings));
  line("excess_length_strategy", c.excess_length_strategy);
  line("dataset_prepared_path", quoted(c.dataset_prepared_path.string()));
  line("dataset_processes", std::to_string(c.dataset_processes));
  // A whole count is written as an integer, the way users write it.
  line("val_set_size",
       c.val_set_size >= 1 ? std::to_string(static_cast<int64_t>(c.val_set_size)) : format_double(c.val_set_size));
  line("micro_batch_size", std::to_string(c.micro_batch_size));
  line("gradient_accumulation_steps", std::to_string(c.gradient_accumulation_steps));
  line("num_epochs", std::to_string(c.num_epochs));
  line("max_steps", std::to_string(c.max_steps));
  line("learning_rate", format_double(c.learning_rate));
  line("lr_scheduler", c.lr_scheduler);
  line("warmup_steps", std::to_string(c.warmup_steps));
  line("warmup_ratio", format_double(c.warmup_ratio));
  line("optimizer", c.optimizer);
  line("adam_beta1", format_double(c.adam_beta1));
  line("adam_beta2", format_double(c.adam_beta2));
  line("adam_epsilon", format_double(c.adam_epsilon));
  line("weight_decay", format_double(c.weight_decay));
  line("max_grad_norm", format_double(c.max_grad_norm));
  line("loraplus_lr_ratio", c.loraplus_lr_ratio ? format_double(*c.loraplus_lr_ratio) : "null");
  line("loraplus_lr_embedding", c.loraplus_lr_embedding ? format_double(*c.loraplus_lr_embedding) : "null");
  switch (c.gradient_checkpointing) {
    case GradientCheckpointing::off:
      line("gradient_checkpointing", "false");
      break;
    case GradientCheckpointing::every_layer:
      line("gradient_checkpointing", "true");
      break;
    case GradientCheckpointing::every_kth:
      line("gradient_checkpointing", "every_kth");
      break;
  }
  line("gradient_checkpointing_every_k", std::to_string(c.gradient_checkpointing_every_k));
  line("activation_offloading", c.activation_offloading ? "true" : "false");
  line("tiled_mlp", c.tiled_mlp ? "true" : "false");
  line("tiled_mlp_num_shards", std::to_string(c.tiled_mlp_num_shards));
  switch (c.bf16) {
    case Bf16::off:
      line("bf16", "false");
      break;
    case Bf16::on:
      line("bf16", "true");
      break;
    case Bf16::automatic:
      line("bf16", "auto");
      break;
  }
  line("fp16", boolean_text(c.fp16));
  line("device", c.device);
  line("offload_layers", c.offload_layers_auto ? "auto" : std::to_string(c.offload_layers));
  line("offload_prefetch_depth", std::to_string(c.offload_prefetch_depth));
  line("gpu_memory_limit", format_byte_size(c.gpu_memory_limit));
  line("output_dir", quoted(c.output_dir.string()));
  line("save_steps", std::to_string(c.save_steps));
  line("saves_per_epoch", std::to_string(c.saves_per_epoch));
  line("save_total_limit", std::to_string(c.save_total_limit));
  line("logging_steps", std::to_string(c.logging_steps));
  line("loss_watchdog_threshold", format_double(c.loss_watchdog_threshold));
  line("loss_watchdog_patience", std::to_string(c.loss_watchdog_patience));
  line("eval_steps", std::to_string(c.eval_steps));
  line("evals_per_epoch", std::to_string(c.evals_per_epoch));
  line("seed", std::to_string(c.seed));
  line("resume_from_checkpoint",
       c.resume_from_latest_checkpoint    ? "true"
       : c.resume_from_checkpoint.empty() ? "false"
                                          : quoted(c.resume_from_checkpoint.string()));
  line("auto_resume_from_checkpoints", boolean_text(c.auto_resume_from_checkpoints));
  line("overwrite_output_dir", boolean_text(c.overwrite_output_dir));
  line("use_tensorboard", boolean_text(c.use_tensorboard));
  line("ddp_timeout", std::to_string(c.ddp_timeout));
  line("ddp_backend", c.ddp_backend);
  line("shard_base", boolean_text(c.shard_base));
  return out.str();
}

}  // namespace qtrain::engine::config
