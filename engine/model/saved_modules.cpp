// See saved_modules.h and Note [Modules trained in full] there.
#include "engine/model/saved_modules.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <filesystem>

namespace qtrain::engine::model {

std::string embed_tokens_module(const ModelConfig& config) {
  return config.weight_prefix + "embed_tokens";
}

namespace {

at::Tensor trainable_copy(const at::Tensor& weight, const at::Device& device) {
  return weight.detach().to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
}

}  // namespace

void attach_new_saved_modules(CausalLM& model, const lora::LoraConfig& config) {
  const auto embed = embed_tokens_module(model.config());
  const auto norms = model.norm_weights();
  for (const std::string& entry : config.modules_to_save) {
    auto names = [&](const std::string& module) { return lora::LoraConfig::saved_module_entry_names(entry, module); };
    bool found = false;
    if (names(embed)) {
      found = true;
      if (!model.trained_embed_tokens().defined()) {
        model.set_trained_embed_tokens(trainable_copy(model.embed_tokens(), model.device()));
      }
    }
    if (names(kLmHeadModule)) {
      found = true;
      if (!model.trained_lm_head().defined())
        model.set_trained_lm_head(trainable_copy(model.lm_head(), model.device()));
    }
    for (const auto& [module, weight] : norms) {
      if (!names(module)) continue;
      found = true;
      if (!model.trained_norms().count(module)) model.set_trained_norm(module, trainable_copy(weight, model.device()));
    }
    TORCH_CHECK(found,
                "modules_to_save names '",
                entry,
                "', which ends no path of this model's token embeddings (",
                embed,
                "), output head (",
                kLmHeadModule,
                ") or norms (",
                norms.front().first,
                ", ..., ",
                norms.back().first,
                "): use embed_tokens, lm_head or a norm's name");
  }
}

void attach_saved_modules(CausalLM& model,
                          const std::map<std::string, at::Tensor>& modules,
                          const std::string& source) {
  const auto embed = embed_tokens_module(model.config());
  std::map<std::string, at::Tensor> norms;
  for (const auto& [module, weight] : model.norm_weights()) norms.emplace(module, weight);
  for (const auto& [module, weight] : modules) {
    const bool is_embed = module == embed, is_head = module == kLmHeadModule;
    const auto norm = norms.find(module);
    TORCH_CHECK(is_embed || is_head || norm != norms.end(),
                source,
                ": the adapter trains the module '",
                module,
                "' in full, but this model's token embeddings are ",
                embed,
                ", its output head ",
                kLmHeadModule,
                " and its norms named like ",
                norms.begin()->first,
                ": the adapter was trained on another architecture");
    const auto& frozen = is_embed ? model.embed_tokens() : is_head ? model.lm_head() : norm->second;
    TORCH_CHECK(weight.sizes() == frozen.sizes(),
                (std::filesystem::path(source) / "adapter_model.safetensors").string(),
                ": '",
                module,
                ".weight' is ",
                weight.sizes(),
                " but the base model's is ",
                frozen.sizes(),
                is_embed || is_head ? " (vocab_size x hidden_size)" : "",
                ": the adapter was trained on another base model",
                is_embed || is_head ? " or vocabulary" : "");
    auto copy = trainable_copy(weight, model.device());
    if (is_embed) {
      model.set_trained_embed_tokens(copy);
    } else if (is_head) {
      model.set_trained_lm_head(copy);
    } else {
      model.set_trained_norm(module, copy);
    }
  }
}

std::map<std::string, at::Tensor> saved_modules(const CausalLM& model) {
  std::map<std::string, at::Tensor> out = model.trained_norms();
  if (model.trained_embed_tokens().defined()) out[embed_tokens_module(model.config())] = model.trained_embed_tokens();
  if (model.trained_lm_head().defined()) out[kLmHeadModule] = model.trained_lm_head();
  return out;
}

}  // namespace qtrain::engine::model
