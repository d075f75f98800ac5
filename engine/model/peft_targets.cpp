// See peft_targets.h and Note [peft's MoE target conversion] there.
#include "engine/model/peft_targets.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace qtrain::engine::model {
namespace {

struct Rename {
  const char* old_name;   // the transformers 4 linear
  const char* parameter;  // the transformers 5 parameter it became
};

constexpr Rename kQwenRenames[] = {
    {"gate", "gate.weight"}, {"gate_proj", "gate_up_proj"}, {"up_proj", "gate_up_proj"}, {"down_proj", "down_proj"}};
constexpr Rename kMixtralRenames[] = {
    {"gate", "gate.weight"}, {"w1", "gate_up_proj"}, {"w3", "gate_up_proj"}, {"w2", "down_proj"}};

template <class Value>
void set_pattern(std::vector<std::pair<std::string, Value>>& pattern, const std::string& key, Value value) {
  const auto it = std::find_if(pattern.begin(), pattern.end(), [&](const auto& p) { return p.first == key; });
  if (it != pattern.end()) {
    it->second = value;
  } else {
    pattern.emplace_back(key, value);
  }
}

}  // namespace

lora::LoraConfig peft_targets(lora::LoraConfig config, const ModelConfig& model, const std::string& where) {
  if (!model.moe || model.moe->router_is_linear) return config;
  const bool mixtral = model.arch == Architecture::mixtral;
  const auto& renames = mixtral ? kMixtralRenames : kQwenRenames;
  std::set<std::string> modules(config.target_modules.begin(), config.target_modules.end());
  const bool all_linear = config.target_all_linear;
  if (all_linear) {
    // Every nn.Linear's last component but lm_head's: the attention's (a dense layer's MLP has
    // the old names below), then the old names themselves.
    modules.insert({"q_proj", "k_proj", "v_proj", "o_proj"});
    for (const Rename& r : renames) modules.insert(r.old_name);
    config.target_all_linear = false;
  }
  std::vector<std::string> kept;
  std::set<std::string> fused_parts;  // the old names found that became gate_up_proj
  for (const std::string& entry : modules) {
    const auto it = std::find_if(std::begin(renames), std::end(renames), [&](const Rename& r) {
      return lora::LoraConfig::ends_with_component(entry, r.old_name);
    });
    if (it == std::end(renames)) {
      kept.push_back(entry);
      continue;
    }
    if (std::find(config.target_parameters.begin(), config.target_parameters.end(), it->parameter) ==
        config.target_parameters.end()) {
      config.target_parameters.emplace_back(it->parameter);
    }
    if (std::string(it->parameter) == "gate_up_proj") fused_parts.insert(it->old_name);
  }
  TORCH_CHECK(config.dropout == 0 || config.target_parameters.empty(),
              where,
              ": lora_dropout is ",
              config.dropout,
              ", but on ",
              architecture_name(model.arch),
              all_linear ? " lora_target_linear (peft's all-linear)" : " lora_target_modules",
              " adapts the routers and experts as parameters (target_parameters ",
              c10::Join(", ", config.target_parameters),
              "), which take no dropout: peft refuses it too. Set lora_dropout: 0, or target the attention only "
              "(lora_target_modules: [q_proj, k_proj, v_proj, o_proj])");
  const std::string gate = mixtral ? "w1" : "gate_proj", up = mixtral ? "w3" : "up_proj";
  TORCH_CHECK(fused_parts.size() != 1,
              where,
              ": LoRA targets ",
              *fused_parts.begin(),
              " but not ",
              fused_parts.count(gate) ? up : gate,
              "; on ",
              architecture_name(model.arch),
              " the two are one fused parameter (mlp.experts.gate_up_proj), as peft reads them: target both, or "
              "gate_up_proj through lora_target_parameters");
  if (fused_parts.size() == 2) {
    set_pattern(config.rank_pattern, R"(.*\.gate_up_proj)", 2 * config.r);
    set_pattern(config.alpha_pattern, R"(.*\.gate_up_proj)", 2 * config.alpha);
  }
  config.target_modules = kept;
  return config;
}

}  // namespace qtrain::engine::model
