// See run_config.h. Reading goes in three passes: collect the top-level keys of the file and of
// the --set arguments (classifying each as known, unsupported-axolotl or unknown, and remembering
// where it was written), read each known key with its type and range, then check the
// combinations. Every message has the form `<place>: <key>: <problem>; <fix>`.
// The passes live beside this file: config_entries (collecting), config_reader (typed reads and
// datasets), config_problems (every problem at once); this file holds the keys, in order.
#include "engine/config/run_config.h"

#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "engine/config/byte_size.h"
#include "engine/config/chat_template_choice.h"
#include "engine/config/config_entries.h"
#include "engine/config/config_problems.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_limits.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"
#include "engine/lora/lora_config.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::config {

namespace fs = std::filesystem;

namespace {

// One token of special_tokens; "" (as to_yaml writes an unset one) leaves the tokenizer's.
std::string text_of_token(const Entry& e, const std::string& example) {
  if (!e.value.IsScalar()) {
    e.fail_value("expected a token, got " + shown(e.value) + "; write e.g. " + example);
  }
  return e.value.Scalar();
}

// Note [FSDP keys]
// axolotl turns FSDP on with `fsdp: [full_shard, auto_wrap]` (or the string "full_shard auto_wrap",
// as transformers' TrainingArguments reads it) and tunes it with `fsdp_config`; from axolotl 0.10
// `fsdp_config` (with `fsdp_version: 2`) is enough. qtrain's counterpart is shard_base: a sharding
// strategy (full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2) or an fsdp_config turns it
// on, no_shard leaves it off. What FSDP tunes besides (wrapping, state-dict type, its own CPU
// offload of parameters, ...) has no counterpart, since qtrain shards each decoder layer's
// quantized bytes and gathers them layer by layer: those options are named once as ignored, and
// FSDP's parameter offload is pointed to offload_layers. A written shard_base that disagrees is
// an error.
void read_fsdp(Reader& r, RunConfig& c) {
  static const std::vector<std::string> kStrategies = {
      "full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2"};
  std::optional<bool> on;
  std::string on_place;
  r.guard({"fsdp"}, [&] {
    const Entry* e = r.find("fsdp");
    if (!e) return;
    std::vector<std::string> words;
    if (e->value.IsScalar()) {
      std::istringstream in(e->value.Scalar());
      for (std::string w; in >> w;) words.push_back(w);
    } else {
      words = r.strings_of(*e, "[full_shard, auto_wrap]");
    }
    for (const auto& w : words) {
      if (std::find(kStrategies.begin(), kStrategies.end(), w) != kStrategies.end()) {
        on = true;
      } else if (w == "no_shard") {
        on = on.value_or(false);
      } else if (w == "auto_wrap") {
        c.ignored_keys.push_back("fsdp: auto_wrap (qtrain shards and gathers each decoder layer)");
      } else if (w == "offload") {
        c.ignored_keys.push_back(
            "fsdp: offload (FSDP's CPU offload of parameters; qtrain streams layers from host RAM with offload_layers: "
            "auto)");
      } else {
        e->fail_value("'" + w +
                      "' is not an FSDP option; use full_shard (qtrain's shard_base: true), shard_grad_op, "
                      "hybrid_shard, hybrid_shard_zero2, no_shard, offload or auto_wrap");
      }
    }
    on_place = r.place_of("fsdp");
  });
  r.guard({"fsdp_config"}, [&] {
    const Entry* e = r.find("fsdp_config");
    if (!e) return;
    if (!e->value.IsMap()) e->fail_value("expected a mapping of FSDP options, e.g. {fsdp_offload_params: false}");
    if (!on) {
      on = true;
      on_place = r.place_of("fsdp_config");
    }
    std::vector<std::string> names;
    bool offload_params = false;
    for (const auto& kv : e->value) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : shown(kv.first);
      names.push_back(name);
      offload_params = offload_params || ((name == "fsdp_offload_params" || name == "offload_params") &&
                                          kv.second.IsScalar() && parse_bool(kv.second.Scalar()).value_or(false));
    }
    if (!names.empty()) {
      c.ignored_keys.push_back("fsdp_config: " + join(names, ", ") +
                               " (FSDP's tuning; qtrain shards each decoder layer's quantized bytes and gathers them "
                               "layer by layer" +
                               (offload_params ? "; for parameters in host RAM use offload_layers: auto" : "") + ")");
    }
  });
  r.guard({"fsdp_version"}, [&] {
    if (const Entry* e = r.find("fsdp_version")) {
      c.ignored_keys.push_back("fsdp_version: " + shown(e->value) + " (qtrain's sharding has one version)");
    }
  });
  if (!on) return;
  r.guard({"shard_base"}, [&] {
    if (const Entry* e = r.find_written("shard_base"); e && !e->value.IsNull() && c.shard_base != *on) {
      e->fail_value(std::string("shard_base is ") + (c.shard_base ? "true" : "false") + " but " + on_place +
                    (*on ? " turns sharding on" : " says no_shard") + "; remove one of the two");
    }
  });
  c.shard_base = *on;
}

RunConfig read_config(Reader& r) {
  RunConfig c;
  c.base_model = r.path("base_model", "");
  r.guard({"base_model"}, [&] {
    TORCH_CHECK(!c.base_model.empty(),
                r.place_of("base_model"),
                ": base_model: missing; set it to a local Hugging Face model folder, e.g. base_model: ./models/llama");
  });

  c.load_in_4bit = r.boolean("load_in_4bit", c.load_in_4bit);
  c.load_in_8bit = r.boolean("load_in_8bit", c.load_in_8bit);
  c.bnb_4bit_quant_type = r.choice("bnb_4bit_quant_type", c.bnb_4bit_quant_type, {"nf4", "fp4"});
  c.bnb_4bit_use_double_quant = r.boolean("bnb_4bit_use_double_quant", c.bnb_4bit_use_double_quant);
  c.bnb_4bit_blocksize = r.integer("bnb_4bit_blocksize",
                                   c.bnb_4bit_blocksize,
                                   Range{.lo = 32, .hi = 4096},
                                   "use a power of 2 from 32 to 4096 (64 is bitsandbytes' default)");
  r.guard({"bnb_4bit_blocksize"}, [&] {
    if (const int64_t b = c.bnb_4bit_blocksize; (b & (b - 1)) != 0) {
      c.bnb_4bit_blocksize = 64;
      r.find("bnb_4bit_blocksize")
          ->fail_value(std::to_string(b) +
                       " is not a power of 2; use 32, 64, 128, ..., 4096 (64 is bitsandbytes' default)");
    }
  });
  c.llm_int8_threshold =
      r.number("llm_int8_threshold",
               c.llm_int8_threshold,
               at_least(0),
               "use a magnitude such as 6.0 (bitsandbytes' default); 0 computes every column in int8");
  c.int8_compute = r.choice("int8_compute", c.int8_compute, {"dequantize", "llm_int8"});
  c.quantize_moe_experts = r.boolean("quantize_moe_experts", c.quantize_moe_experts);
  r.guard({"model_config", "overrides_of_model_config"}, [&] {
    const Entry* e = r.find("model_config");
    // axolotl's older spelling of the same map.
    if (const Entry* older = r.find("overrides_of_model_config")) {
      if (e) {
        fail(older->key_place(),
             older->key,
             "model_config is given too (at " + e->key_place() +
                 "); overrides_of_model_config is its older spelling: keep one of them");
      }
      e = older;
    }
    if (!e) return;
    const std::string example = e->key + ": {output_router_logits: true}";
    if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
    const std::string prefix = e->key + ".";
    for (const Entry& inner : map_entries(e->value, e->origin, prefix)) {
      const std::string name = inner.key.substr(prefix.size());
      if (name == "output_router_logits") {
        c.output_router_logits = r.boolean_of(inner);
      } else if (name == "router_aux_loss_coef") {
        c.router_aux_loss_coef =
            r.number_of(inner, at_least(0), "use a coefficient such as 0.001 (transformers' default) or 0.02");
      } else {
        fail(inner.key_place(),
             inner.key,
             "qtrain reads only output_router_logits and router_aux_loss_coef from model_config; change other "
             "values in the model's config.json");
      }
    }
  });

  // axolotl's `adapter:` left blank means a full fine-tune, which qtrain does not do; that must
  // not turn into LoRA silently.
  r.guard({"adapter"}, [&] {
    if (const Entry* e = r.find_written("adapter"); e && e->value.IsNull()) {
      fail(e->key_place(),
           "adapter",
           "blank (axolotl's full fine-tune); qtrain trains LoRA adapters only, set adapter: lora or adapter: qlora");
    }
  });
  c.adapter = r.choice("adapter", c.load_in_4bit ? "qlora" : "lora", {"lora", "qlora"});
  c.lora_r = r.integer("lora_r", c.lora_r, between(1, kMaxLoraRank), "use a rank of 1 or more, typically 8 to 64");
  c.lora_alpha = r.number("lora_alpha", c.lora_alpha, above(0), "use a positive number, commonly lora_r or 2 * lora_r");
  c.lora_dropout = r.number(
      "lora_dropout", c.lora_dropout, unit_interval_open(), "use a value from 0 (off) to below 1, typically 0.05");
  auto targets = r.module_targets("lora_target_modules");
  c.lora_target_modules = std::move(targets.names);
  c.lora_target_modules_regex = std::move(targets.regex);
  c.lora_target_linear = r.boolean("lora_target_linear", c.lora_target_linear);
  c.lora_target_parameters = r.module_names("lora_target_parameters");
  c.lora_modules_to_save = r.module_names("lora_modules_to_save");
  c.unfrozen_parameters = r.strings("unfrozen_parameters", "[^lm_head.weight$, ^model.embed_tokens.weight$[32000:]]");
  r.guard({"lora_modules_to_save"}, [&] {
    for (const std::string& m : c.lora_modules_to_save) {
      if (!lora::LoraConfig::ends_with_component(m, "embed_tokens") &&
          !lora::LoraConfig::ends_with_component(m, "lm_head")) {
        fail(r.place_of("lora_modules_to_save"),
             "lora_modules_to_save",
             "names '" + m +
                 "'; qtrain trains the token embeddings and the output head in full (embed_tokens, lm_head) and no "
                 "other module");
      }
    }
  });
  c.peft_use_rslora = r.boolean("peft_use_rslora", c.peft_use_rslora);
  c.peft_use_dora = r.boolean("peft_use_dora", c.peft_use_dora);
  for (const char* key : {"lora_rank_pattern", "lora_alpha_pattern"}) {
    r.guard({key}, [&] {
      const Entry* e = r.find(key);
      if (!e || e->value.IsNull()) return;
      const bool ranks = std::string_view(key) == "lora_rank_pattern";
      const std::string example = std::string(key) + (ranks ? ": {\".*\\\\.o_proj\": 32}" : ": {\"o_proj\": 64}");
      if (!e->value.IsMap())
        e->fail_value("expected a map of module-name patterns, got " + shown(e->value) + "; write e.g. " + example);
      const std::string prefix = e->key + ".";
      for (const Entry& inner : map_entries(e->value, e->origin, prefix)) {
        const std::string pattern = inner.key.substr(prefix.size());
        if (const std::string problem = lora::LoraConfig::regex_problem(pattern); !problem.empty()) {
          fail(inner.key_place(), inner.key, problem);
        }
        if (ranks) {
          c.lora_rank_pattern.emplace_back(
              pattern, r.integer_of(inner, between(1, kMaxLoraRank), "use a rank of 1 or more, typically 8 to 64"));
        } else {
          c.lora_alpha_pattern.emplace_back(
              pattern, r.number_of(inner, above(0), "use a positive number, commonly the module's rank or twice it"));
        }
      }
    });
  }
  c.lora_model_dir = r.path("lora_model_dir", c.lora_model_dir);

  c.datasets = r.datasets("datasets");
  c.sequence_len =
      r.integer("sequence_len", c.sequence_len, between(1, kMaxSequenceLen), "use the tokens per sample, e.g. 2048");
  c.sample_packing = r.boolean("sample_packing", c.sample_packing);
  c.train_on_inputs = r.boolean("train_on_inputs", c.train_on_inputs);
  c.chat_template_jinja = r.text("chat_template_jinja", "chat_template_jinja: ./chatml.jinja");
  c.chat_template = r.choice("chat_template",
                             c.chat_template_jinja.empty() ? c.chat_template : "jinja",
                             chat_template_choices(),
                             chat_template_choice_help(),
                             {});
  c.eot_tokens = r.strings("eot_tokens", "eot_tokens: [\"<|im_end|>\"]");
  r.guard({"chat_template"}, [&] {
    DatasetConfig top;  // what the top-level keys mean, checked even when no dataset uses them
    apply_chat_template(
        c.chat_template,
        c.chat_template_jinja,
        [&](const fs::path& p) { return r.resolve(p); },
        r.place_of("chat_template"),
        r.place_of("chat_template_jinja"),
        top);
    for (DatasetConfig& d : c.datasets) {
      if (!d.chat_template.empty()) continue;  // the dataset's own; see Reader::read_chat_keys
      d.chat_template_source = top.chat_template_source;
      d.chat_template_fallback = top.chat_template_fallback;
    }
  });
  for (DatasetConfig& d : c.datasets) d.eot_tokens = c.eot_tokens;
  r.guard({"special_tokens"}, [&] {
    const Entry* e = r.find("special_tokens");
    if (!e) return;
    const std::string example = "special_tokens: {pad_token: \"<|end_of_text|>\"}";
    if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
    c.special_tokens.place = e->key_place();
    for (const Entry& role : map_entries(e->value, e->origin, "special_tokens.")) {
      const std::string name = role.key.substr(std::string("special_tokens.").size());
      std::string* slot = name == "bos_token"   ? &c.special_tokens.bos_token
                          : name == "eos_token" ? &c.special_tokens.eos_token
                          : name == "pad_token" ? &c.special_tokens.pad_token
                          : name == "unk_token" ? &c.special_tokens.unk_token
                                                : nullptr;
      if (!slot) {
        fail(role.key_place(),
             role.key,
             name == "additional_special_tokens"
                 ? "marking more tokens special changes how text containing them is split, which qtrain does not do; "
                   "remove the key"
                 : "qtrain reads bos_token, eos_token, pad_token and unk_token here; remove the key");
      }
      if (role.value.IsNull()) continue;
      *slot = text_of_token(role, example);
    }
  });
  c.tokens = r.strings("tokens", "tokens: [\"<|im_start|>\", \"<|im_end|>\"]");
  c.resize_token_embeddings_to_32x = r.boolean("resize_token_embeddings_to_32x", c.resize_token_embeddings_to_32x);
  c.mean_resizing_embeddings = r.boolean("mean_resizing_embeddings", c.mean_resizing_embeddings);
  c.shrink_embeddings = r.boolean("shrink_embeddings", c.shrink_embeddings);
  c.excess_length_strategy = r.choice("excess_length_strategy",
                                      c.excess_length_strategy,
                                      {"drop", "truncate", "raise"},
                                      "use drop (axolotl's default), truncate or raise",
                                      {});
  for (DatasetConfig& d : c.datasets) d.excess_length_strategy = c.excess_length_strategy;
  c.dataset_prepared_path = r.path("dataset_prepared_path", c.dataset_prepared_path);
  c.dataset_processes = r.integer("dataset_processes",
                                  c.dataset_processes,
                                  between(0, kMaxDatasetProcesses),
                                  "use the threads that tokenize rows, or 0 for every core");
  r.guard({"val_set_size"}, [&] {
    if (const Entry* e = r.find("val_set_size")) {
      const std::string fix = "use a fraction such as 0.05, a whole number of rows such as 500, or 0 for none";
      const double v = r.number_of(*e, at_least(0), fix);
      if (v >= 1 && std::floor(v) != v) {
        e->fail_value(e->value.Scalar() + " is neither a fraction in [0, 1) nor a whole number of rows >= 1; " + fix);
      }
      c.val_set_size = v;
    }
  });

  c.micro_batch_size = r.integer("micro_batch_size",
                                 c.micro_batch_size,
                                 between(1, kMaxMicroBatchSize),
                                 "use the samples per forward pass, 1 or more");
  c.gradient_accumulation_steps = r.integer("gradient_accumulation_steps",
                                            c.gradient_accumulation_steps,
                                            between(1, kMaxGradientAccumulationSteps),
                                            "use the micro-batches per optimizer step, 1 or more");
  c.num_epochs = r.integer("num_epochs", c.num_epochs, between(1, kMaxEpochs), "use 1 or more passes over the data");
  c.max_steps =
      r.integer("max_steps", c.max_steps, between(-1, kMaxSteps), "use -1 (run num_epochs) or a step count >= 1");
  r.guard({"max_steps"}, [&] {
    if (c.max_steps == 0) {
      c.max_steps = -1;
      r.find("max_steps")->fail_value("0 is neither -1 (run num_epochs) nor a step count; use -1 or a count >= 1");
    }
  });
  c.learning_rate = r.number("learning_rate",
                             c.learning_rate,
                             between(0, kMaxLearningRate, /*lo_open=*/true),
                             "use a positive rate, e.g. 2e-4 for LoRA (a rate above 10 diverges at the first step)");
  c.lr_scheduler = r.choice("lr_scheduler", c.lr_scheduler, {"constant", "linear", "cosine"});
  c.warmup_steps =
      r.integer("warmup_steps", c.warmup_steps, between(0, kMaxSteps), "use 0 (no warmup) or a step count");
  c.warmup_ratio = r.number(
      "warmup_ratio", c.warmup_ratio, unit_interval_open(), "use a fraction of the run such as 0.03, or 0 for none");
  c.optimizer = r.choice("optimizer",
                         c.optimizer,
                         {"adamw_torch", "adamw_bnb_8bit"},
                         "qtrain implements AdamW: use adamw_torch (also read from adamw, adamw_torch_fused and "
                         "paged_adamw_32bit) or bitsandbytes' 8-bit AdamW adamw_bnb_8bit (also read from "
                         "adamw_8bit, paged_adamw_8bit, adamw_torch_8bit and adamw_torch_4bit)",
                         {{"adamw", "adamw_torch"},
                          {"adamw_torch_fused", "adamw_torch"},
                          {"paged_adamw_32bit", "adamw_torch"},
                          {"adamw_8bit", "adamw_bnb_8bit"},
                          {"paged_adamw_8bit", "adamw_bnb_8bit"},
                          {"adamw_torch_8bit", "adamw_bnb_8bit"},
                          {"adamw_torch_4bit", "adamw_bnb_8bit"}});
  // The same optimizer with another way to hold its state in memory: see Note [Performance hints].
  if (const Entry* e = r.find("optimizer"); e && e->value.IsScalar()) {
    const std::string& name = e->value.Scalar();
    if (name == "adamw_torch_fused") {
      c.ignored_keys.push_back("optimizer: adamw_torch_fused (the same AdamW; fusing is a kernel choice)");
    } else if (name == "paged_adamw_32bit" || name == "paged_adamw_8bit") {
      c.ignored_keys.push_back("optimizer: " + name + " (the same " +
                               (name == "paged_adamw_8bit" ? "8-bit AdamW, adamw_bnb_8bit" : "AdamW") +
                               "; paging moves its state to host memory under pressure, and LoRA's state is small)");
    } else if (name == "adamw_torch_8bit" || name == "adamw_torch_4bit") {
      // torchao's low-bit AdamW. Not a performance hint: the updates differ in their rounding.
      // Never 32-bit state for a low-bit name: the user chose it to save memory. Named so that the
      // run says what it trains with.
      c.ignored_keys.push_back(
          "optimizer: " + name + " (torchao's " + (name == "adamw_torch_8bit" ? "8" : "4") +
          "-bit AdamW is not implemented; qtrain runs bitsandbytes' 8-bit AdamW, adamw_bnb_8bit, whose state is "
          "quantized in blocks of 256 as bitsandbytes does it" +
          (name == "adamw_torch_4bit" ? ", at twice the bytes of torchao's 4-bit state" : std::string()) + ")");
    }
  }
  c.adam_beta1 = r.number("adam_beta1", c.adam_beta1, unit_interval_open(), "use a value in [0, 1), e.g. 0.9");
  c.adam_beta2 = r.number("adam_beta2", c.adam_beta2, unit_interval_open(), "use a value in [0, 1), e.g. 0.999");
  c.adam_epsilon = r.number("adam_epsilon", c.adam_epsilon, above(0), "use a small positive number, e.g. 1e-8");
  c.weight_decay = r.number("weight_decay", c.weight_decay, at_least(0), "use 0 (none) or a positive decay, e.g. 0.01");
  c.max_grad_norm =
      r.number("max_grad_norm", c.max_grad_norm, at_least(0), "use 0 (no clipping) or a positive norm, e.g. 1.0");
  if (r.find("loraplus_lr_ratio") != nullptr) {
    c.loraplus_lr_ratio = r.number(
        "loraplus_lr_ratio", 1.0, above(0), "use lora_B's learning rate over lora_A's, e.g. 16 (the LoRA+ paper's)");
  }
  if (r.find("loraplus_lr_embedding") != nullptr) {
    c.loraplus_lr_embedding =
        r.number("loraplus_lr_embedding", 1e-6, at_least(0), "use a learning rate, e.g. 1e-6 (peft's default)");
  }

  r.guard({"gradient_checkpointing"}, [&] {
    if (const Entry* e = r.find("gradient_checkpointing")) {
      const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
      if (on) {
        c.gradient_checkpointing = *on ? GradientCheckpointing::every_layer : GradientCheckpointing::off;
      } else if (e->value.IsScalar() && e->value.Scalar() == "every_kth") {
        c.gradient_checkpointing = GradientCheckpointing::every_kth;
      } else if (e->value.IsScalar() && e->value.Scalar() == "offload") {
        // axolotl's older spelling of activation_offloading: true.
        c.gradient_checkpointing = GradientCheckpointing::every_layer;
        c.activation_offloading = true;
      } else {
        e->fail_value("expected true, false, offload or every_kth, got " + shown(e->value));
      }
    }
  });
  c.tiled_mlp = r.boolean("tiled_mlp", c.tiled_mlp);
  c.tiled_mlp_num_shards = r.integer("tiled_mlp_num_shards",
                                     c.tiled_mlp_num_shards,
                                     at_least(0),
                                     "use a number of chunks, or 0 (chunks of at most 4096 tokens)");
  r.guard({"tiled_mlp_num_shards", "tiled_mlp"}, [&] {
    if (const Entry* e = r.find_written("tiled_mlp_num_shards"); e && c.tiled_mlp_num_shards > 0 && !c.tiled_mlp) {
      fail(e->key_place(), e->key, "has no effect unless tiled_mlp: true; set that, or remove this key");
    }
  });
  r.guard({"activation_offloading", "gradient_checkpointing"}, [&] {
    const Entry* e = r.find("activation_offloading");
    if (e == nullptr) return;
    const std::string value = e->value.IsScalar() ? e->value.Scalar() : std::string();
    if (const std::optional<bool> on = parse_bool(value)) {
      c.activation_offloading = c.activation_offloading || *on;
    } else if (value == "legacy" || value == "hidden_states") {
      // Both are what qtrain does for true: axolotl's legacy copies synchronously and its
      // hidden_states offloads only the checkpointed layers' inputs; qtrain's copies always
      // overlap the compute, and the checkpointed inputs are all a step keeps between layers.
      c.activation_offloading = true;
      c.ignored_keys.push_back("activation_offloading: " + value +
                               " (read as true: the checkpointed layers' inputs wait in pinned host memory, copied "
                               "on the copy stream while the compute runs)");
    } else if (value == "disk") {
      e->fail_value(
          "disk (activations written to files) is not supported; use true: the inputs wait in pinned host memory");
    } else {
      e->fail_value("expected true, false, legacy, hidden_states or disk, got " + shown(e->value));
    }
    if (c.activation_offloading && c.gradient_checkpointing == GradientCheckpointing::off) {
      fail(e->key_place(),
           e->key,
           "needs gradient_checkpointing (it offloads the inputs checkpointed layers keep for their recompute), "
           "and gradient_checkpointing is false; set gradient_checkpointing: true, or remove this key");
    }
  });

  c.gradient_checkpointing_every_k = r.integer(
      "gradient_checkpointing_every_k", c.gradient_checkpointing_every_k, at_least(1), "use 1 (every layer) or more");
  r.guard({"gradient_checkpointing_every_k", "gradient_checkpointing"}, [&] {
    if (const Entry* e = r.find_written("gradient_checkpointing_every_k");
        e && c.gradient_checkpointing_every_k != 1 && c.gradient_checkpointing != GradientCheckpointing::every_kth) {
      fail(e->key_place(),
           e->key,
           std::to_string(c.gradient_checkpointing_every_k) +
               " has no effect unless gradient_checkpointing: every_kth; set that, or remove this key");
    }
  });
  r.guard({"bf16"}, [&] {
    if (const Entry* e = r.find("bf16")) {
      const std::optional<bool> on = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
      if (on) {
        c.bf16 = *on ? Bf16::on : Bf16::off;
      } else if (e->value.IsScalar() && e->value.Scalar() == "auto") {
        c.bf16 = Bf16::automatic;
      } else {
        e->fail_value("expected true, false or auto, got " + shown(e->value));
      }
    }
  });

  c.fp16 = r.boolean("fp16", c.fp16);
  r.guard({"device"}, [&] {
    if (const Entry* e = r.find("device")) {
      const std::string v = e->value.IsScalar() ? e->value.Scalar() : "";
      const bool indexed = v.starts_with("cuda:") && v.size() > 5 && parse_int(v.substr(5)).value_or(-1) >= 0 &&
                           std::isdigit(static_cast<unsigned char>(v[5]));
      if (v != "auto" && v != "cpu" && v != "cuda" && !indexed) {
        e->fail_value("expected auto, cpu, cuda or cuda:N, got " + shown(e->value) + "; e.g. device: cuda:0");
      }
      c.device = v;
    }
  });

  r.guard({"offload_layers"}, [&] {
    if (const Entry* e = r.find("offload_layers")) {
      if (e->value.IsScalar() && e->value.Scalar() == "auto") {
        c.offload_layers_auto = true;
      } else {
        c.offload_layers = r.integer_of(
            *e, at_least(0), "use auto (as few layers as fit gpu_memory_limit) or a number of layers, 0 for none");
      }
    }
  });

  c.offload_prefetch_depth = r.integer("offload_prefetch_depth",
                                       c.offload_prefetch_depth,
                                       at_least(1),
                                       "use 1 (copy the next offloaded layer while one computes) or more");
  r.guard({"gpu_memory_limit"}, [&] {
    if (const Entry* e = r.find("gpu_memory_limit")) {
      const std::optional<int64_t> v = e->value.IsScalar() ? parse_byte_size(e->value.Scalar()) : std::nullopt;
      if (!v) {
        e->fail_value("expected a size such as 20GiB, 24GB or 20 (GiB), got " + shown(e->value) +
                      "; 0 or blank: the whole device");
      }
      c.gpu_memory_limit = *v;
    }
  });

  c.output_dir = r.path("output_dir", c.output_dir);
  r.guard({"output_dir"}, [&] {
    if (c.output_dir.empty()) {
      c.output_dir = "./outputs";
      r.find_written("output_dir")->fail_value("empty; set a folder for checkpoints and the adapter, e.g. ./outputs");
    }
  });
  c.save_steps =
      r.integer("save_steps", c.save_steps, between(0, kMaxSteps), "use 0 (save at the end only) or a step interval");
  c.saves_per_epoch =
      r.integer("saves_per_epoch", c.saves_per_epoch, between(0, kMaxPerEpoch), "use 0 (unset) or a count of saves");
  c.save_total_limit =
      r.integer("save_total_limit", c.save_total_limit, at_least(0), "use 0 (keep all) or the checkpoints to keep");
  c.logging_steps =
      r.integer("logging_steps", c.logging_steps, between(1, kMaxSteps), "use a step interval of 1 or more");
  c.loss_watchdog_threshold = r.number("loss_watchdog_threshold",
                                       c.loss_watchdog_threshold,
                                       at_least(0),
                                       "use 0 (off) or the loss above which the run stops, e.g. 5.0");
  c.loss_watchdog_patience = r.integer("loss_watchdog_patience",
                                       c.loss_watchdog_patience,
                                       at_least(1),
                                       "use the logged steps in a row above the threshold that stop the run, e.g. 3");
  c.eval_steps = r.integer("eval_steps", c.eval_steps, between(0, kMaxSteps), "use 0 (never) or a step interval");
  c.evals_per_epoch = r.integer(
      "evals_per_epoch", c.evals_per_epoch, between(0, kMaxPerEpoch), "use 0 (unset) or a count of evaluations");
  c.seed = r.integer("seed", c.seed, at_least(0), "use a non-negative integer");
  r.guard({"resume_from_checkpoint"}, [&] {
    if (const Entry* e = r.find("resume_from_checkpoint")) {
      const std::optional<bool> latest = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
      if (latest) {
        c.resume_from_latest_checkpoint = *latest;
      } else {
        c.resume_from_checkpoint = r.resolve(r.path_of(*e));
      }
    }
  });

  c.auto_resume_from_checkpoints = r.boolean("auto_resume_from_checkpoints", c.auto_resume_from_checkpoints);
  c.overwrite_output_dir = r.boolean("overwrite_output_dir", c.overwrite_output_dir);
  c.use_tensorboard = r.boolean("use_tensorboard", c.use_tensorboard);
  c.ddp_timeout = r.integer("ddp_timeout",
                            c.ddp_timeout,
                            between(1, kMaxDdpTimeout),
                            "use the seconds a rank waits for the others, e.g. 1800");
  c.ddp_backend = r.choice("ddp_backend", c.ddp_backend, {"auto", "nccl", "gloo"});
  c.shard_base = r.boolean("shard_base", c.shard_base);
  read_fsdp(r, c);  // See Note [FSDP keys].
  r.check_all_read();

  // --- combinations ---
  // The depth also sets how far ahead a sharded base gathers and offloaded activations come back.
  r.guard({"offload_prefetch_depth", "offload_layers", "activation_offloading", "shard_base"}, [&] {
    if (const Entry* e = r.find_written("offload_prefetch_depth"); e && c.offload_prefetch_depth != 1 &&
                                                                   !c.offload_layers_auto && c.offload_layers == 0 &&
                                                                   !c.activation_offloading && !c.shard_base) {
      fail(e->key_place(),
           e->key,
           std::to_string(c.offload_prefetch_depth) +
               " has no effect without offloaded layers, activation offloading or a sharded base; set "
               "offload_layers (auto or a number), or remove this key");
    }
  });
  r.guard({"load_in_8bit", "load_in_4bit"}, [&] {
    if (c.load_in_4bit && c.load_in_8bit) {
      fail(r.place_of("load_in_8bit"),
           "load_in_8bit",
           "load_in_4bit (" + r.place_of("load_in_4bit") +
               ") and load_in_8bit are both true; choose one quantization of the base (4-bit for QLoRA)");
    }
  });

  r.guard({"adapter", "load_in_4bit"}, [&] {
    if (c.adapter == "qlora" && !c.load_in_4bit) {
      fail(r.place_of("adapter"),
           "adapter",
           "qlora needs load_in_4bit: true (it is false); set load_in_4bit: true, or use adapter: lora");
    }
  });

  r.guard({"adapter", "load_in_4bit"}, [&] {
    if (c.adapter == "lora" && c.load_in_4bit) {
      fail(r.place_of("adapter"),
           "adapter",
           "lora with load_in_4bit: true is QLoRA; write adapter: qlora, or remove load_in_4bit");
    }
  });

  r.guard({"lora_target_modules", "lora_target_linear", "lora_target_parameters"}, [&] {
    if (c.lora_target_modules.empty() && c.lora_target_modules_regex.empty() && !c.lora_target_linear &&
        c.lora_target_parameters.empty()) {
      const std::string key = r.find_written("lora_target_modules")  ? "lora_target_modules"
                              : r.find_written("lora_target_linear") ? "lora_target_linear"
                                                                     : "lora_target_modules";
      fail(r.place_of(key),
           key,
           "no LoRA target modules; list them (lora_target_modules: [q_proj, k_proj, v_proj, o_proj]) "
           "or target every linear layer (lora_target_linear: true)");
    }
  });

  r.guard({"lora_target_parameters", "lora_dropout"}, [&] {
    if (!c.lora_target_parameters.empty() && c.lora_dropout > 0) {
      fail(r.place_of("lora_dropout"),
           "lora_dropout",
           "LoRA on parameters (lora_target_parameters, MoE experts) has no dropout, as in PEFT, which refuses it; "
           "set lora_dropout: 0");
    }
  });

  r.guard({"warmup_ratio", "warmup_steps"}, [&] {
    if (c.warmup_steps > 0 && c.warmup_ratio > 0) {
      fail(r.place_of("warmup_ratio"),
           "warmup_ratio",
           "warmup_steps (" + std::to_string(c.warmup_steps) + ", at " + r.place_of("warmup_steps") +
               ") and warmup_ratio are both set; keep one");
    }
  });

  r.guard({"warmup_steps", "max_steps"}, [&] {
    // A short trial run (--set max_steps=8) of a config with warmup: transformers and axolotl run
    // it with the learning rate still rising at the end, and so does qtrain, saying so.
    if (c.max_steps > 0 && c.warmup_steps > c.max_steps) {
      c.warnings.push_back(r.place_of("warmup_steps") + ": warmup_steps " + std::to_string(c.warmup_steps) +
                           " is more than max_steps (" + std::to_string(c.max_steps) + ", at " +
                           r.place_of("max_steps") + "): the learning rate rises for the whole run, to " +
                           std::to_string(c.max_steps) + "/" + std::to_string(c.warmup_steps) +
                           " of learning_rate, as transformers and axolotl run it");
    }
  });

  // Each factor is bounded above, so the products fit in 64 bits. See run_limits.h.
  r.guard({"micro_batch_size", "sequence_len", "gradient_accumulation_steps"}, [&] {
    const int64_t forward = c.micro_batch_size * c.sequence_len;
    const std::string sizes =
        "micro_batch_size " + std::to_string(c.micro_batch_size) + " * sequence_len " + std::to_string(c.sequence_len);
    if (forward > kMaxTokensPerMicroBatch) {
      fail(r.place_of("micro_batch_size"),
           "micro_batch_size",
           sizes + " = " + std::to_string(forward) +
               " tokens in one forward pass, more than 2^31 that qtrain accepts; lower micro_batch_size or "
               "sequence_len and raise gradient_accumulation_steps");
    }
    const int64_t step = forward * c.gradient_accumulation_steps;
    if (step > kMaxTokensPerStep) {
      fail(r.place_of("gradient_accumulation_steps"),
           "gradient_accumulation_steps",
           sizes + " * gradient_accumulation_steps " + std::to_string(c.gradient_accumulation_steps) + " = " +
               std::to_string(step) +
               " tokens per optimizer step, more than 2^34 that qtrain accepts; lower gradient_accumulation_steps");
    }
  });

  r.guard({"fp16", "bf16"}, [&] {
    if (c.fp16 && c.bf16 != Bf16::off) {
      fail(r.place_of("fp16"),
           "fp16",
           "fp16 and bf16 (" + r.place_of("bf16") + ") are both on; choose one (bf16: false to train in fp16)");
    }
  });

  // axolotl refuses these pairs too (src/axolotl/utils/schemas/validation.py).
  r.guard({"saves_per_epoch", "save_steps"}, [&] {
    if (c.saves_per_epoch > 0 && c.save_steps > 0) {
      fail(r.place_of("saves_per_epoch"),
           "saves_per_epoch",
           "save_steps (" + r.place_of("save_steps") + ") is set too; they are two ways to say one thing, keep one");
    }
  });
  r.guard({"evals_per_epoch", "eval_steps"}, [&] {
    if (c.evals_per_epoch > 0 && c.eval_steps > 0) {
      fail(r.place_of("evals_per_epoch"),
           "evals_per_epoch",
           "eval_steps (" + r.place_of("eval_steps") + ") is set too; they are two ways to say one thing, keep one");
    }
  });

  r.guard({"eval_steps", "val_set_size"}, [&] {
    if (c.eval_steps > 0 && c.val_set_size == 0) {
      fail(r.place_of("eval_steps"),
           "eval_steps",
           "evaluating every " + std::to_string(c.eval_steps) +
               " steps needs held-out rows, but val_set_size is 0; set val_set_size (e.g. 0.05) or eval_steps: 0");
    }
  });

  return c;
}

}  // namespace

RunConfig parse_run_config(const std::string& yaml_text,
                           const std::string& source_name,
                           const std::filesystem::path& base_dir,
                           const std::vector<std::string>& overrides) {
  const YAML::Node root = load_document(yaml_text, source_name);
  Problems problems;
  EntrySet entries;
  for (Entry& e : map_entries(root, Origin::file(source_name), "")) {
    problems.guard({e.key}, [&] { entries.add_top_level(std::move(e)); });
  }
  for (const std::string& argument : overrides) {
    problems.guard({argument}, [&] { entries.add_top_level(parse_override(argument)); });
  }
  Reader reader(entries.entries(), source_name, base_dir, problems);
  RunConfig c = read_config(reader);
  problems.throw_if_any(source_name);
  c.ignored_keys.insert(c.ignored_keys.begin(), entries.ignored().begin(), entries.ignored().end());
  return c;
}

RunConfig load_run_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  const auto problem = text::regular_file_problem(file, text::kMaxConfigBytes);
  TORCH_CHECK(problem.empty(), file.string(), " ", problem);
  std::ifstream in(file, std::ios::binary);
  TORCH_CHECK(in.good(),
              file.string(),
              ": cannot read the run config (",
              std::error_code(errno, std::generic_category()).message(),
              "); check the path");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_run_config(text.str(), file.string(), fs::absolute(file).parent_path(), overrides);
}

std::string ignored_keys_note(const RunConfig& c) {
  if (c.ignored_keys.empty()) return "";
  return "accepted and ignored (they do not change what is trained): " + join(c.ignored_keys, ", ");
}

}  // namespace qtrain::engine::config
