// See model_setup.h.
#include "engine/train/model_setup.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include "engine/io/bnb_checkpoint.h"
#include "engine/model/peft_targets.h"
#include "ops/quant/codebook.h"

namespace qtrain::engine::train {

at::Device resolve_device(const std::string& device) {
  if (device == "auto") return at::hasCUDA() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  at::Device d(device);
  TORCH_CHECK(d.is_cpu() || d.is_cuda(), "device '", device, "' is not supported; use auto, cpu, cuda or cuda:N");
  if (d.is_cuda() && !d.has_index()) d = at::Device(at::kCUDA, 0);  // memory limits and streams need an index
  TORCH_CHECK(!d.is_cuda() || at::hasCUDA(),
              "device '",
              device,
              "' was asked for but no CUDA device is available; use device: cpu or auto");
  return d;
}

at::ScalarType compute_dtype(const config::RunConfig& config, const at::Device& device) {
  if (config.fp16) return at::kHalf;
  if (config.bf16 == config::Bf16::on) return at::kBFloat16;
  if (config.bf16 == config::Bf16::automatic && device.is_cuda()) return at::kBFloat16;
  return at::kFloat;
}

model::QuantSpec quant_spec(const config::RunConfig& config) {
  model::QuantSpec q;
  if (config.load_in_4bit) {
    q.kind = config.bnb_4bit_quant_type == "fp4" ? model::QuantSpec::Kind::fp4 : model::QuantSpec::Kind::nf4;
    q.blocksize = config.bnb_4bit_blocksize;
    q.double_quant = config.bnb_4bit_use_double_quant;
  } else if (config.load_in_8bit) {
    q.kind = model::QuantSpec::Kind::int8;
  }
  q.int8_threshold = config.llm_int8_threshold;
  q.int8_compute = config.int8_compute == "llm_int8" ? ops::Int8Compute::llm_int8 : ops::Int8Compute::dequantize;
  return q;
}

std::string base_quantization_note(const nlohmann::json& config_json,
                                   const std::string& where,
                                   const config::RunConfig& config) {
  const std::string asked = config.load_in_4bit   ? config.bnb_4bit_quant_type
                            : config.load_in_8bit ? "int8"
                                                  : "not quantized";
  const auto saved = io::checkpoint_quantization(config_json, where);
  if (!saved) return asked;
  const std::string have = saved->bits == 8 ? "int8" : std::string(ops::quant_type_name(saved->quant_type));
  std::string note = have + (saved->bits == 4 && saved->double_quant ? " with double quantization" : "") +
                     " (saved quantized by bitsandbytes: " + where + "'s quantization_config";
  const bool same = have == asked && (saved->bits == 8 || saved->double_quant == config.bnb_4bit_use_double_quant);
  if (!same) {
    const std::string settings =
        config.load_in_4bit
            ? "load_in_4bit: true, bnb_4bit_quant_type: " + config.bnb_4bit_quant_type +
                  ", bnb_4bit_use_double_quant: " + (config.bnb_4bit_use_double_quant ? "true" : "false")
        : config.load_in_8bit ? std::string("load_in_8bit: true")
                              : std::string("neither load_in_4bit nor load_in_8bit");
    note += "; the run config's " + settings +
            " does not apply: the saved weights are used as they are, as transformers does. Set the run config to "
            "match, or train on the float model to quantize it your way";
  }
  return note + ")";
}

model::LoadOptions load_options(const config::RunConfig& config) {
  model::LoadOptions o;
  o.device = resolve_device(config.device);
  o.dtype = compute_dtype(config, o.device);
  o.quant = quant_spec(config);
  o.quantize_moe_experts = config.quantize_moe_experts;
  if (config.output_router_logits) o.model_config["output_router_logits"] = *config.output_router_logits;
  if (config.router_aux_loss_coef) o.model_config["router_aux_loss_coef"] = *config.router_aux_loss_coef;
  return o;
}

lora::LoraConfig lora_config(const config::RunConfig& config, const model::ModelConfig& model) {
  lora::LoraConfig c;
  c.r = config.lora_r;
  c.alpha = config.lora_alpha;
  c.dropout = config.lora_dropout;
  c.target_modules = config.lora_target_modules;
  c.target_modules_regex = config.lora_target_modules_regex;
  c.target_all_linear = config.lora_target_linear;
  c.use_rslora = config.peft_use_rslora;
  c.use_dora = config.peft_use_dora;
  c.target_parameters = config.lora_target_parameters;
  c.rank_pattern = config.lora_rank_pattern;
  c.alpha_pattern = config.lora_alpha_pattern;
  c.modules_to_save = config.lora_modules_to_save;
  return model::peft_targets(c, model, "the run config");
}

schedule::CheckpointPolicy checkpoint_policy(const config::RunConfig& config) {
  switch (config.gradient_checkpointing) {
    case config::GradientCheckpointing::off:
      return schedule::CheckpointPolicy::none;
    case config::GradientCheckpointing::every_kth:
      return schedule::CheckpointPolicy::every_kth;
    case config::GradientCheckpointing::every_layer:
      break;
  }
  return schedule::CheckpointPolicy::every_layer;
}

}  // namespace qtrain::engine::train
