// See merged_weights.h.
#include "engine/model/merged_weights.h"

#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <ATen/ATen.h>

#include "engine/lora/lora_linear.h"
#include "engine/model/saved_modules.h"

namespace qtrain::engine::model {
namespace {

// Note [Merged tensors]
// A linear's merged weight takes the name of its base weight ("<module>.weight"). The experts of
// a sparse layer are written back in whichever of the layouts of Note [Expert tensor names] the
// folder has, recognised by name: fused "...layers.N.<block>experts.gate_up_proj" [E, 2I, H] and
// "...down_proj" [E, H, I], or per expert "...layers.N.<block>experts.e.<part>.weight" with part
// gate_proj / up_proj / down_proj (Qwen3-MoE) or w1 / w3 / w2 (Mixtral), gate and up being rows
// 0..I-1 and I..2I-1 of qtrain's gate_up. A pre-quantized base stores bitsandbytes state beside
// each quantized weight ("<module>.weight.absmax", "...weight.quant_map", "...weight.nested_*",
// "...weight.quant_state.bitsandbytes__nf4"; int8's "<module>.SCB", "<module>.weight_format"):
// it belongs to the weight it quantized and goes with it.
const std::regex kFusedExperts(R"(.*layers\.(\d+)\..*experts\.(gate_up_proj|down_proj))");
const std::regex kExpertWeight(R"(.*layers\.(\d+)\..*experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight)");

struct MergedExperts {
  std::vector<at::Tensor> gate_up, down;  // per expert, float32
};

// Expert e's merged weight of `part` (its gate_up or down layers), float32.
at::Tensor merged_expert(const std::vector<LinearLayer>& part, const std::optional<lora::ExpertLora>& lora, int64_t e) {
  const auto w = part[e].dense_weight(at::kFloat);
  return lora ? lora::lora_merged_weight(w, lora->experts()[e]) : w;
}

MergedExperts merge_experts(const MoeExperts& ex) {
  MergedExperts m;
  for (int64_t e = 0; e < ex.num_experts(); ++e) {
    m.gate_up.push_back(merged_expert(ex.gate_up, ex.gate_up_lora, e));
    m.down.push_back(merged_expert(ex.down, ex.down_lora, e));
  }
  return m;
}

// ExpertTensors::stacked: the layer's experts as gate_proj, up_proj and down_proj, each stacked
// over the experts and merged when made.
std::vector<MergedTensor> stacked_expert_makers(const MoeExperts& ex, at::ScalarType dtype) {
  const int64_t n = ex.num_experts(), h = ex.hidden_size(), i = ex.intermediate_size();
  const auto stacked = [&ex, n, dtype](bool gate_up, int64_t start, int64_t rows) {
    return [&ex, n, dtype, gate_up, start, rows] {
      std::vector<at::Tensor> parts;
      for (int64_t e = 0; e < n; ++e) {
        const auto w =
            gate_up ? merged_expert(ex.gate_up, ex.gate_up_lora, e) : merged_expert(ex.down, ex.down_lora, e);
        parts.push_back(w.narrow(0, start, rows).to(dtype));
      }
      return at::stack(parts);
    };
  };
  return {{ex.name + ".gate_proj", {n, i, h}, stacked(true, 0, i)},
          {ex.name + ".up_proj", {n, i, h}, stacked(true, i, i)},
          {ex.name + ".down_proj", {n, h, i}, stacked(false, 0, h)}};
}

// Whether `name` is an expert tensor of a sparse layer of `lm`: `m` holds the match (m[1] the
// layer) and `fused` says which of the two layouts.
bool match_expert(const std::string& name, const CausalLM& lm, std::smatch& m, bool& fused) {
  fused = std::regex_match(name, m, kFusedExperts);
  if (!fused && !std::regex_match(name, m, kExpertWeight)) return false;
  const int64_t layer = std::stoll(m[1]);
  return layer < static_cast<int64_t>(lm.layers().size()) && lm.layers()[layer].moe;
}

// The sparse layer an expert tensor of the folder belongs to, or -1.
int64_t expert_layer(const std::string& name, const CausalLM& lm) {
  std::smatch m;
  bool fused = false;
  return match_expert(name, lm, m, fused) ? std::stoll(m[1]) : -1;
}

// The merged tensor stored under `name` when it is an expert weight of a sparse layer, else an
// undefined tensor.
at::Tensor expert_tensor(const std::string& name, const CausalLM& lm, std::map<int64_t, MergedExperts>& experts) {
  std::smatch m;
  bool fused = false;
  if (!match_expert(name, lm, m, fused)) return {};
  const int64_t layer = std::stoll(m[1]);
  auto it = experts.find(layer);
  if (it == experts.end()) it = experts.emplace(layer, merge_experts(lm.layers()[layer].moe->experts)).first;
  const auto& ex = it->second;
  if (fused) return at::stack(m[2] == "gate_up_proj" ? ex.gate_up : ex.down);
  const int64_t e = std::stoll(m[2]);
  TORCH_CHECK(e < static_cast<int64_t>(ex.down.size()),
              name,
              ": expert ",
              e,
              " but the layer has ",
              ex.down.size(),
              " experts (num_experts in config.json)");
  const std::string part = m[3];
  if (part == "down_proj" || part == "w2") return ex.down[e];
  const int64_t i = ex.down[e].size(1);
  return ex.gate_up[e].narrow(0, part == "gate_proj" || part == "w1" ? 0 : i, i);
}

// Whether `name` is bitsandbytes' quantization state of a weight in `weights`: "<w>.weight.<...>"
// (4-bit: absmax, quant_map, nested_*, quant_state.*) or the 8-bit siblings "<w>.SCB" and
// "<w>.weight_format". A layer's bias ("<w>.bias") is a tensor of its own.
template <class Map>
bool quant_state_of(const std::string& name, const Map& weights) {
  const auto w = name.find(".weight.");
  if (w != std::string::npos && weights.count(name.substr(0, w + 7))) return true;
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const auto leaf = name.substr(dot + 1);
  return (leaf == "SCB" || leaf == "weight_format") && weights.count(name.substr(0, dot) + ".weight");
}

}  // namespace

std::vector<MergedTensor> merged_tensor_makers(const CausalLM& lm,
                                               const io::HfFolder& folder,
                                               at::ScalarType dtype,
                                               ExpertTensors expert_tensors) {
  // By stored name: the shape, and how to make the tensor in float32.
  std::map<std::string, std::pair<std::vector<int64_t>, std::function<at::Tensor()>>> weights;
  for (const auto& layer : lm.layers()) {
    for (const auto* l : layer.linears()) {
      weights[l->name + ".weight"] = {{l->out_features, l->in_features}, [l] {
                                        const auto w = l->dense_weight(at::kFloat);
                                        return l->lora ? lora::lora_merged_weight(w, *l->lora) : w;
                                      }};
    }
    // A router is written as qtrain holds it, in full precision (also where the base stored it
    // quantized), with its adapter merged (Note [Router LoRA]).
    if (const auto& moe = layer.moe) {
      const auto* m = &*moe;
      const auto router = m->gemma4_router ? m->gemma4_router->proj : m->router;
      weights[m->router_stored] = {router.sizes().vec(), [m, router] {
                                     const auto w = router.to(at::kFloat);
                                     return m->router_lora ? lora::lora_merged_weight(w, *m->router_lora) : w;
                                   }};
    }
  }
  const auto as_float = [](const at::Tensor& t) {
    return std::pair{t.sizes().vec(), std::function<at::Tensor()>([t] { return t.detach().to(at::kFloat); })};
  };
  // The modules trained in full take the base's place (Note [Modules trained in full]); on a
  // model with tied embeddings the two are written apart, the head as lm_head.weight of its own.
  // Embeddings resized for new tokens (Note [Resized embeddings]) are written as the model has
  // them.
  std::vector<MergedTensor> untied;
  std::string embed_name = embed_tokens_module(lm.config()) + ".weight";
  if (!folder.contains(embed_name) && folder.contains("language_model.model.embed_tokens.weight")) {
    embed_name = "language_model.model.embed_tokens.weight";  // the older multimodal layout
  }
  const bool trained = lm.trained_embed_tokens().defined() || lm.trained_lm_head().defined();
  const bool resized = folder.contains(embed_name) && folder.shape(embed_name).at(0) != lm.config().vocab_size;
  if (trained || resized) {
    const auto embed = lm.trained_embed_tokens().defined() ? lm.trained_embed_tokens() : lm.embed_tokens();
    const auto head = lm.trained_lm_head().defined() ? lm.trained_lm_head() : lm.lm_head();
    weights[embed_name] = as_float(embed);
    if (folder.contains("lm_head.weight")) {
      weights["lm_head.weight"] = as_float(head);
    } else if (trained) {
      untied.push_back(
          {"lm_head.weight", head.sizes().vec(), [head, dtype] { return head.detach().to(dtype).contiguous(); }});
    }
  }
  for (const auto& [module, weight] : lm.trained_norms()) weights[module + ".weight"] = as_float(weight);
  for (const auto& [name, w] : weights) {
    TORCH_CHECK(folder.contains(name),
                folder.dir().string(),
                " has no tensor ",
                name,
                " for the merged weight of that linear: its weights are stored under other names, and merge can "
                "only write back the names it read. Merge with peft's merge_and_unload() instead.");
  }
  // As stored, experts are merged here, a layer at a time (their shapes come from the merge),
  // and held; stacked, they are made below (listed here so that their quantization state goes).
  std::map<int64_t, MergedExperts> experts;
  std::map<std::string, int64_t> stacked_layer;  // stacked: each expert tensor's layer
  const auto names = folder.tensor_names();
  for (const auto& name : names) {
    if (weights.count(name)) continue;
    if (expert_tensors == ExpertTensors::stacked) {
      if (const int64_t layer = expert_layer(name, lm); layer >= 0) {
        weights[name] = {folder.shape(name), nullptr};
        stacked_layer[name] = layer;
      }
    } else if (auto t = expert_tensor(name, lm, experts); t.defined()) {
      weights[name] = {t.sizes().vec(), [t] { return t; }};
    }
  }
  std::vector<MergedTensor> out;
  std::set<int64_t> stacked;  // the sparse layers whose experts are in `out`
  for (const auto& name : names) {
    if (const auto layer = stacked_layer.find(name); layer != stacked_layer.end()) {
      if (stacked.insert(layer->second).second) {
        for (auto& t : stacked_expert_makers(lm.layers()[layer->second].moe->experts, dtype))
          out.push_back(std::move(t));
      }
    } else if (const auto it = weights.find(name); it != weights.end()) {
      out.push_back(
          {name, it->second.first, [make = it->second.second, dtype] { return make().to(dtype).contiguous(); }});
    } else if (!quant_state_of(name, weights)) {
      out.push_back({name, folder.shape(name), [&folder, name, dtype] {
                       const auto t = folder.tensor(name);
                       return at::isFloatingType(t.scalar_type()) ? t.to(dtype) : t;
                     }});
    }
  }
  out.insert(out.end(), untied.begin(), untied.end());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> merged_tensors(const CausalLM& lm,
                                                               const io::HfFolder& folder,
                                                               at::ScalarType dtype) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& t : merged_tensor_makers(lm, folder, dtype)) out.emplace_back(t.name, t.make());
  return out;
}

bool merge_unties_embeddings(const CausalLM& lm) {
  return lm.config().tie_word_embeddings && (lm.trained_embed_tokens().defined() || lm.trained_lm_head().defined());
}

}  // namespace qtrain::engine::model
