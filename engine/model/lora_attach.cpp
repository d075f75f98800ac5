// See lora_attach.h.
#include "engine/model/lora_attach.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace qtrain::engine::model {

int64_t attach_new_lora(CausalLM& model, const lora::LoraConfig& config, uint64_t seed) {
  config.validate("LoRA config");
  auto gen = at::detail::createCPUGenerator(seed);
  int64_t adapted = 0;
  for (auto& layer : model.layers()) {
    for (auto* linear : layer.linears()) {
      if (!config.targets(linear->name)) continue;
      linear->lora = lora::lora_init(linear->in_features, linear->out_features, config, gen, model.device());
      ++adapted;
    }
  }
  TORCH_CHECK(adapted > 0,
              "LoRA targets [",
              c10::Join(", ", config.target_modules),
              "] match no linear layer of the model; its layers are named like ",
              model.layers().at(0).q.name,
              " and ",
              model.layers().at(0).down.name,
              " (use the last component, e.g. q_proj, or lora_target_linear: true)");
  return adapted;
}

void attach_lora(CausalLM& model, const io::LoadedAdapter& adapter, const std::string& source) {
  std::map<std::string, LinearLayer*> by_name;
  for (auto& layer : model.layers()) {
    for (auto* linear : layer.linears()) by_name[linear->name] = linear;
  }
  for (const auto& [module, a] : adapter.adapters) {
    auto it = by_name.find(module);
    TORCH_CHECK(it != by_name.end(),
                source,
                ": the adapter has weights for '",
                module,
                "', which is not a linear layer of this model (an adapter for another architecture?)");
    auto* linear = it->second;
    TORCH_CHECK(a.in_features() == linear->in_features && a.out_features() == linear->out_features,
                source,
                ": ",
                module,
                " adapter is [",
                a.out_features(),
                " x ",
                a.in_features(),
                "] but the layer is [",
                linear->out_features,
                " x ",
                linear->in_features,
                "]");
    lora::LoraAdapter copy = a;
    copy.a = a.a.to(model.device(), at::kFloat).detach().requires_grad_(true);
    copy.b = a.b.to(model.device(), at::kFloat).detach().requires_grad_(true);
    linear->lora = std::move(copy);
  }
}

std::map<std::string, lora::LoraAdapter> lora_adapters(const CausalLM& model) {
  std::map<std::string, lora::LoraAdapter> out;
  for (const auto& layer : model.layers()) {
    for (const auto* linear : layer.linears()) {
      if (linear->lora) out.emplace(linear->name, *linear->lora);
    }
  }
  return out;
}

}  // namespace qtrain::engine::model
