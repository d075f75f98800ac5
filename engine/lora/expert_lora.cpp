// See expert_lora.h and Note [Expert LoRA layout] there.
#include "engine/lora/expert_lora.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string_view>

namespace qtrain::engine::lora {

std::vector<LoraAdapter> ExpertLora::experts() const {
  const int64_t r = rank();
  // A [r*E, in] is expert-major, B [out, r*E] expert-minor (See Note [Expert LoRA layout]).
  const auto as = stacked.a.view({num_experts, r, stacked.a.size(1)}).unbind(0);
  const auto bs = stacked.b.view({stacked.b.size(0), r, num_experts}).unbind(2);
  std::vector<LoraAdapter> out;
  for (int64_t e = 0; e < num_experts; ++e) {
    LoraAdapter a = stacked;
    a.a = as[e];
    a.b = bs[e];
    out.push_back(a);
  }
  return out;
}

ExpertLora expert_lora_init(int64_t num_experts,
                            int64_t in_features,
                            int64_t out_features,
                            const LoraConfig& config,
                            at::Generator gen,
                            at::Device device) {
  TORCH_CHECK(num_experts > 0, "expert_lora_init: num_experts must be positive, got ", num_experts);
  LoraConfig stacked = config;
  stacked.r = config.r * num_experts;
  // lora_init draws A [r*E, in] with the kaiming bound of `in`, as PEFT's reset on the whole A.
  LoraAdapter a = lora_init(in_features, out_features, stacked, gen, device);
  a.scaling = config.scaling();
  a.dropout = 0.0;
  return ExpertLora{std::move(a), num_experts};
}

std::string expert_adapter_module(const std::string& experts, const std::string& parameter, bool down_proj_adapted) {
  return parameter == "gate_up_proj" && down_proj_adapted ? experts + ".base_layer" : experts;
}

std::string expert_parameter_path(const std::string& module, const LoraConfig& config) {
  constexpr std::string_view kNested = ".base_layer";
  const std::string experts = module.ends_with(kNested) ? module.substr(0, module.size() - kNested.size()) : module;
  const bool down = config.targets_parameter(experts + ".down_proj");
  for (const char* parameter : {"gate_up_proj", "down_proj"}) {
    const std::string path = experts + "." + parameter;
    if (config.targets_parameter(path) && expert_adapter_module(experts, parameter, down) == module) return path;
  }
  return "";
}

void check_expert_lora(const LoraAdapter& stacked,
                       int64_t num_experts,
                       int64_t r,
                       int64_t in_features,
                       int64_t out_features,
                       const std::string& where) {
  TORCH_CHECK(stacked.a.dim() == 2 && stacked.b.dim() == 2 && stacked.a.size(0) == r * num_experts &&
                  stacked.a.size(1) == in_features && stacked.b.size(0) == out_features &&
                  stacked.b.size(1) == r * num_experts,
              where,
              ": expert LoRA A is ",
              stacked.a.sizes(),
              " and B ",
              stacked.b.sizes(),
              "; for ",
              num_experts,
              " experts of [",
              out_features,
              ", ",
              in_features,
              "] at r = ",
              r,
              " PEFT's layout is A [",
              r * num_experts,
              ", ",
              in_features,
              "] and B [",
              out_features,
              ", ",
              r * num_experts,
              "]");
}

}  // namespace qtrain::engine::lora
