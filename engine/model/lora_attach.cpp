// See lora_attach.h.
#include "engine/model/lora_attach.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <tuple>

#include "engine/lora/expert_lora.h"
#include "engine/model/saved_modules.h"

namespace qtrain::engine::model {
namespace {

// The experts' two adapters with their PEFT module paths; see Note [Expert LoRA module names].
struct ExpertSlot {
  std::string module;
  std::string parameter;  // "<experts>.gate_up_proj": what rank_pattern and alpha_pattern match
  std::optional<lora::ExpertLora>* lora;
  int64_t in, out;
};

// The targeted ones of the experts' two parameters.
std::vector<ExpertSlot> expert_slots(MoeExperts& ex, const lora::LoraConfig& config) {
  std::vector<ExpertSlot> slots;
  const int64_t h = ex.hidden_size(), i = ex.intermediate_size();
  const bool down = config.targets_parameter(ex.name + ".down_proj");
  for (const auto& [parameter, lora, in, out] :
       {std::tuple{"gate_up_proj", &ex.gate_up_lora, h, 2 * i}, std::tuple{"down_proj", &ex.down_lora, i, h}}) {
    const std::string path = ex.name + "." + parameter;
    if (config.targets_parameter(path)) {
      slots.push_back({lora::expert_adapter_module(ex.name, parameter, down), path, lora, in, out});
    }
  }
  return slots;
}

// A copy of a loaded adapter as trainable float32 leaves on `device`.
lora::LoraAdapter trainable_on(const lora::LoraAdapter& adapter, at::Device device) {
  lora::LoraAdapter copy = adapter;
  copy.a = adapter.a.to(device, at::kFloat).detach().requires_grad_(true);
  copy.b = adapter.b.to(device, at::kFloat).detach().requires_grad_(true);
  if (adapter.magnitude.defined()) {
    copy.magnitude = adapter.magnitude.to(device, at::kFloat).detach().requires_grad_(true);
  }
  return copy;
}

}  // namespace

int64_t attach_new_lora(CausalLM& model, const lora::LoraConfig& config, uint64_t seed) {
  config.validate("LoRA config");
  auto gen = at::detail::createCPUGenerator(seed);
  int64_t adapted = 0;
  for (auto& layer : model.layers()) {
    for (auto* linear : layer.linears()) {
      if (!config.targets(linear->name)) continue;
      linear->lora = lora::lora_init(
          linear->in_features, linear->out_features, config.for_module(linear->name), gen, model.device());
      if (config.use_dora)
        linear->lora->magnitude = lora::dora_magnitude(linear->dense_weight(model.dtype()), *linear->lora);
      ++adapted;
    }
    if (!layer.moe) continue;
    auto& moe = *layer.moe;
    const auto& moe_config = *model.config().moe;
    if (targets_router(config, moe_config, moe.router_module)) {
      moe.router_lora = lora::lora_init(model.config().hidden_size,
                                        moe_config.num_experts,
                                        config.for_module(router_lora_path(moe_config, moe.router_module)),
                                        gen,
                                        model.device());
      if (config.use_dora) {
        const auto& proj = moe.gemma4_router ? moe.gemma4_router->proj : moe.router;
        moe.router_lora->magnitude = lora::dora_magnitude(proj.to(model.dtype()), *moe.router_lora);
      }
      ++adapted;
    }
    auto& ex = moe.experts;
    for (const auto& slot : expert_slots(ex, config)) {
      *slot.lora = lora::expert_lora_init(
          ex.num_experts(), slot.in, slot.out, config.for_module(slot.parameter), gen, model.device());
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
  attach_new_saved_modules(model, config);
  return adapted;
}

void attach_lora(CausalLM& model, const io::LoadedAdapter& adapter, const std::string& source) {
  std::map<std::string, LinearLayer*> by_name;
  std::map<std::string, std::pair<ExpertSlot, int64_t>> experts_by_name;  // slot, number of experts
  std::map<std::string, MoeBlock*> routers;
  const auto& config = adapter.config;
  for (auto& layer : model.layers()) {
    for (auto* linear : layer.linears()) by_name[linear->name] = linear;
    if (!layer.moe) continue;
    routers[layer.moe->router_module] = &*layer.moe;
    auto& ex = layer.moe->experts;
    for (const auto& slot : expert_slots(ex, config)) {
      experts_by_name.emplace(slot.module, std::pair{slot, ex.num_experts()});
    }
  }
  for (const auto& [module, a] : adapter.adapters) {
    if (auto ex = experts_by_name.find(module); ex != experts_by_name.end()) {
      const auto& [slot, e_count] = ex->second;
      lora::check_expert_lora(a, e_count, config.rank_for(slot.parameter), slot.in, slot.out, source + ": " + module);
      lora::LoraAdapter copy = trainable_on(a, model.device());
      copy.dropout = 0.0;
      *slot.lora = lora::ExpertLora{std::move(copy), e_count};
      continue;
    }
    if (auto router = routers.find(module); router != routers.end()) {
      const int64_t h = model.config().hidden_size, e = model.config().moe->num_experts;
      TORCH_CHECK(a.in_features() == h && a.out_features() == e,
                  (std::filesystem::path(source) / io::kPeftWeightsFile).string(),
                  ": the router adapter '",
                  module,
                  "' has A ",
                  a.a.sizes(),
                  " and B ",
                  a.b.sizes(),
                  ", but this model's router needs A [r, ",
                  h,
                  "] and B [",
                  e,
                  ", r] (hidden_size and num_experts): the adapter was trained on another base model");
      router->second->router_lora = trainable_on(a, model.device());
      continue;
    }
    auto it = by_name.find(module);
    TORCH_CHECK(it != by_name.end(),
                source,
                ": the adapter has weights for '",
                module,
                "', which is not a linear layer of this model (an adapter for another architecture?)");
    auto* linear = it->second;
    // An adapter of another model's width would fail deep in a matmul, or worse, broadcast.
    const bool a_fits = a.in_features() == linear->in_features;
    TORCH_CHECK(a_fits && a.out_features() == linear->out_features,
                (std::filesystem::path(source) / io::kPeftWeightsFile).string(),
                ": '",
                io::kPeftKeyPrefix,
                module,
                a_fits ? ".lora_B.weight' is " : ".lora_A.weight' is ",
                a_fits ? a.b.sizes() : a.a.sizes(),
                " but the base model's ",
                module,
                " needs ",
                a_fits ? "[" + std::to_string(linear->out_features) + ", " + std::to_string(a.rank()) + "]"
                       : "[" + std::to_string(a.rank()) + ", " + std::to_string(linear->in_features) + "]",
                " (the layer is [",
                linear->out_features,
                " x ",
                linear->in_features,
                "], the adapter's [",
                a.out_features(),
                " x ",
                a.in_features(),
                "]): the adapter was trained on another base model",
                adapter.base_model.empty() ? "" : " (adapter_config.json names " + adapter.base_model + ")",
                "; use the base it was trained on, or an adapter trained on this one");
    linear->lora = trainable_on(a, model.device());
  }
  attach_saved_modules(model, adapter.saved_modules, source);
}

std::map<std::string, lora::LoraAdapter> lora_adapters(const CausalLM& model) {
  std::map<std::string, lora::LoraAdapter> out;
  for (const auto& layer : model.layers()) {
    for (const auto* linear : layer.linears()) {
      if (linear->lora) out.emplace(linear->name, *linear->lora);
    }
    if (!layer.moe) continue;
    if (layer.moe->router_lora) out.emplace(layer.moe->router_module, *layer.moe->router_lora);
    const auto& ex = layer.moe->experts;
    const bool down = ex.down_lora.has_value();
    if (ex.gate_up_lora)
      out.emplace(lora::expert_adapter_module(ex.name, "gate_up_proj", down), ex.gate_up_lora->stacked);
    if (down) out.emplace(lora::expert_adapter_module(ex.name, "down_proj", down), ex.down_lora->stacked);
  }
  return out;
}

}  // namespace qtrain::engine::model
