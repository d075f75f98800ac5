// See saved_modules.h and Note [Modules trained in full] there.
#include "engine/model/saved_modules.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <filesystem>

namespace qtrain::engine::model {

std::string embed_tokens_module(const ModelConfig& config) {
  return config.weight_prefix + "embed_tokens";
}

void attach_new_saved_modules(CausalLM& model, const lora::LoraConfig& config) {
  const auto embed = embed_tokens_module(model.config());
  auto copy = [&](const at::Tensor& frozen) {
    return frozen.detach().to(model.device(), at::kFloat, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
  };
  for (const std::string& entry : config.modules_to_save) {
    if (lora::LoraConfig::ends_with_component(embed, entry)) {
      if (!model.trained_embed_tokens().defined()) model.set_trained_embed_tokens(copy(model.embed_tokens()));
    } else if (lora::LoraConfig::ends_with_component(kLmHeadModule, entry)) {
      if (!model.trained_lm_head().defined()) model.set_trained_lm_head(copy(model.lm_head()));
    } else {
      TORCH_CHECK(false,
                  "modules_to_save names '",
                  entry,
                  "', which is neither this model's token embeddings (",
                  embed,
                  ") nor its output head (",
                  kLmHeadModule,
                  "): use embed_tokens and lm_head");
    }
  }
}

void attach_saved_modules(CausalLM& model,
                          const std::map<std::string, at::Tensor>& modules,
                          const std::string& source) {
  const auto embed = embed_tokens_module(model.config());
  for (const auto& [module, weight] : modules) {
    const bool is_embed = module == embed;
    TORCH_CHECK(is_embed || module == kLmHeadModule,
                source,
                ": the adapter trains the module '",
                module,
                "' in full, but this model's token embeddings are ",
                embed,
                " and its output head ",
                kLmHeadModule,
                ": the adapter was trained on another architecture");
    const auto& frozen = is_embed ? model.embed_tokens() : model.lm_head();
    TORCH_CHECK(weight.sizes() == frozen.sizes(),
                (std::filesystem::path(source) / "adapter_model.safetensors").string(),
                ": '",
                module,
                ".weight' is ",
                weight.sizes(),
                " but the base model's is ",
                frozen.sizes(),
                " (vocab_size x hidden_size): the adapter was trained on another base model or vocabulary");
    auto copy = weight.detach().to(model.device(), at::kFloat, false, true).requires_grad_(true);
    is_embed ? model.set_trained_embed_tokens(copy) : model.set_trained_lm_head(copy);
  }
}

std::map<std::string, at::Tensor> saved_modules(const CausalLM& model) {
  std::map<std::string, at::Tensor> out;
  if (model.trained_embed_tokens().defined()) out[embed_tokens_module(model.config())] = model.trained_embed_tokens();
  if (model.trained_lm_head().defined()) out[kLmHeadModule] = model.trained_lm_head();
  return out;
}

}  // namespace qtrain::engine::model
