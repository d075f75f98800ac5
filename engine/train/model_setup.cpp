// See model_setup.h.
#include "engine/train/model_setup.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

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

lora::LoraConfig lora_config(const config::RunConfig& config) {
  lora::LoraConfig c;
  c.r = config.lora_r;
  c.alpha = config.lora_alpha;
  c.dropout = config.lora_dropout;
  c.target_modules = config.lora_target_modules;
  c.target_all_linear = config.lora_target_linear;
  c.use_rslora = config.peft_use_rslora;
  c.target_parameters = config.lora_target_parameters;
  return c;
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
