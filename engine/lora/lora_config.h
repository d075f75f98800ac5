// LoRA hyper-parameters and which modules they apply to, with PEFT's meaning for each.
//
// One struct serves both sources of a LoRA setup: a run config (axolotl keys lora_r, lora_alpha,
// lora_dropout, lora_target_modules, lora_target_linear, lora_target_parameters,
// peft_use_rslora, lora_rank_pattern, lora_alpha_pattern) and an
// adapter_config.json written by PEFT or by qtrain. Matching module names follows PEFT's
// `check_target_module_exists`, for list-valued and for string (regular expression)
// target_modules, so an adapter trained here attaches to the same modules when PEFT loads it.
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qtrain::engine::lora {

struct LoraConfig {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  // Module-name entries: a module matches when its dotted path equals an entry or ends with
  // "." + entry (so "q_proj" matches "model.layers.0.self_attn.q_proj").
  std::vector<std::string> target_modules;
  // PEFT's target_modules given as one string (not "all-linear"): a regular expression that a
  // module's whole dotted path must match (Python's re.fullmatch), e.g.
  // "model.layers.[\d]+.self_attn.(q|v)_proj". Read as ECMAScript (std::regex), which has
  // Python's common syntax; validate() refuses a pattern it cannot compile. Empty: none.
  std::string target_modules_regex;
  // PEFT's "all-linear" / axolotl's lora_target_linear: every linear layer except the output
  // head (lm_head). Combined with target_modules, a module matching either is targeted.
  bool target_all_linear = false;
  bool use_rslora = false;
  // PEFT's use_dora (axolotl's peft_use_dora): weight-decomposed LoRA, a trained magnitude per
  // output row beside A and B (Note [DoRA] in engine/lora/lora_linear.h). Linear modules only:
  // PEFT refuses it on target_parameters.
  bool use_dora = false;
  // PEFT's target_parameters (axolotl's lora_target_parameters): parameters, not modules, matched
  // the same way against "<module path>.<parameter>", e.g. "mlp.experts.gate_up_proj" matches
  // "model.layers.0.mlp.experts.gate_up_proj". Used for the stacked experts of MoE layers (see
  // Note [Expert LoRA layout] in engine/lora/expert_lora.h); PEFT allows no dropout there.
  std::vector<std::string> target_parameters;
  // PEFT's rank_pattern and alpha_pattern (axolotl's lora_rank_pattern, lora_alpha_pattern): a
  // module's own rank and alpha. Each key is a regular expression matched against the end of a
  // module path (for target_parameters: "<module path>.<parameter>") after a dot, as peft's
  // get_pattern_key does (re.match(r"(.*\.)?(KEY)$", path)); the first key that matches, in the
  // order given, wins, else r and alpha. peft reads them from adapter_config.json sorted by key
  // (its writer sorts), so an adapter's come in that order.
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  // PEFT's modules_to_save (axolotl's lora_modules_to_save): modules trained in full beside the
  // adapters, as trainable copies saved in the adapter. qtrain trains the token embeddings, the
  // output head and the norms so; an entry names every module whose path ends with it (peft's
  // rule: "norm" names them all, "model.layers.0.input_layernorm" one). See Note [Modules
  // trained in full] in engine/model/saved_modules.h.
  std::vector<std::string> modules_to_save;
  static bool saved_module_entry_names(const std::string& entry, const std::string& module_path) {
    return !entry.empty() && module_path.ends_with(entry);
  }
  // Whether a modules_to_save entry can name what qtrain trains in full: the embeddings, the head
  // or norms (its last component holds "norm"); which modules it names, the model decides.
  static bool names_trainable_in_full(const std::string& entry) {
    const std::string last = entry.substr(entry.rfind('.') + 1);
    return entry.ends_with("embed_tokens") || entry.ends_with("lm_head") || last.find("norm") != std::string::npos;
  }
  static constexpr const char* kTrainableInFull =
      "qtrain trains the token embeddings, the output head and the norms in full (embed_tokens, lm_head, "
      "input_layernorm, norm, ...) and no other module";
  bool saves_module(const std::string& module_path) const {
    return std::any_of(modules_to_save.begin(), modules_to_save.end(), [&](const std::string& entry) {
      return saved_module_entry_names(entry, module_path);
    });
  }

  // alpha / r, or alpha / sqrt(r) with rsLoRA (PEFT computes both in double, as here).
  double scaling() const { return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / r; }

  // The rank and alpha of the module (or "<module>.<parameter>") at `path`, by the patterns.
  int64_t rank_for(const std::string& path) const;
  double alpha_for(const std::string& path) const;
  // This config with the rank and alpha of `path` and no patterns: what an adapter at `path` is
  // made with (its scaling() is the module's).
  LoraConfig for_module(const std::string& path) const;

  // Whether the linear module at `module_path` (a Hugging Face module path such as
  // "model.layers.0.self_attn.q_proj") gets an adapter. Callers ask only about linear modules:
  // the config knows names, not module types.
  bool targets(const std::string& module_path) const {
    if (module_path.empty()) {
      return false;
    }
    if (target_all_linear && !ends_with_component(module_path, "lm_head")) {
      return true;
    }
    for (const std::string& entry : target_modules) {
      if (!entry.empty() && ends_with_component(module_path, entry)) {
        return true;
      }
    }
    return !target_modules_regex.empty() && matches_regex(target_modules_regex, module_path);
  }

  // Whether `path` matches `pattern` whole (lora_config.cpp, so that <regex> stays out of this
  // header).
  static bool matches_regex(const std::string& pattern, const std::string& path);
  // Why std::regex cannot compile `pattern`, with the way out; empty when it can.
  static std::string regex_problem(const std::string& pattern);

  // Whether the parameter at `parameter_path` ("model.layers.0.mlp.experts.down_proj") gets an
  // adapter through target_parameters.
  bool targets_parameter(const std::string& parameter_path) const {
    for (const std::string& entry : target_parameters) {
      if (!entry.empty() && ends_with_component(parameter_path, entry)) {
        return true;
      }
    }
    return false;
  }

  // `path` equals `entry` or ends with "." + entry.
  static bool ends_with_component(const std::string& path, const std::string& entry) {
    return path == entry ||
           (path.size() > entry.size() && path.ends_with(entry) && path[path.size() - entry.size() - 1] == '.');
  }

  // Rejects values PEFT would reject or that make training meaningless. `where` names the
  // source (a config file, an adapter folder) for the message.
  void validate(const std::string& where) const {
    TORCH_CHECK(r > 0, where, ": LoRA rank r is ", r, "; it must be at least 1 (typical values: 8 to 64)");
    TORCH_CHECK(alpha > 0 && std::isfinite(alpha),
                where,
                ": lora_alpha is ",
                alpha,
                "; it must be a positive number (commonly r or 2*r)");
    TORCH_CHECK(dropout >= 0 && dropout < 1,
                where,
                ": lora_dropout is ",
                dropout,
                "; it must be in [0, 1) (0 disables it, typical: 0.05)");
    TORCH_CHECK(
        target_all_linear || !target_modules.empty() || !target_modules_regex.empty() || !target_parameters.empty(),
        where,
        ": no LoRA target modules; list them (lora_target_modules: [q_proj, k_proj, v_proj, o_proj, ...]) "
        "or target every linear layer (lora_target_linear: true)");
    TORCH_CHECK(target_parameters.empty() || dropout == 0,
                where,
                ": lora_dropout is ",
                dropout,
                " but LoRA on parameters (lora_target_parameters, e.g. MoE experts) has no dropout: PEFT refuses "
                "it, since the experts' delta is merged into the weight; set lora_dropout: 0");
    TORCH_CHECK(!use_dora || target_parameters.empty(),
                where,
                ": DoRA (use_dora) with LoRA on parameters (target_parameters [",
                c10::Join(", ", target_parameters),
                "]): PEFT refuses the pair (its ParamWrapper does not work with use_dora), so the adapter could not "
                "be used there. Drop one; on Qwen3-MoE and Mixtral, lora_target_linear turns the MLP and router "
                "into target_parameters, so list the attention projections instead");
    for (const std::string& entry : target_parameters) {
      TORCH_CHECK(!entry.empty() && !entry.starts_with('.') && !entry.ends_with('.'),
                  where,
                  ": LoRA target parameter '",
                  entry,
                  "' is not a parameter name; use a dotted suffix such as mlp.experts.gate_up_proj");
    }
    for (const std::string& entry : target_modules) {
      TORCH_CHECK(!entry.empty() && !entry.starts_with('.') && !entry.ends_with('.'),
                  where,
                  ": LoRA target module '",
                  entry,
                  "' is not a module name; use a name such as q_proj or a dotted suffix such as self_attn.q_proj");
    }
    for (const std::string& entry : modules_to_save) {
      TORCH_CHECK(names_trainable_in_full(entry), where, ": modules_to_save names '", entry, "'; ", kTrainableInFull);
    }
    if (!target_modules_regex.empty()) {
      const std::string problem = regex_problem(target_modules_regex);
      TORCH_CHECK(problem.empty(), where, ": target_modules ", problem);
    }
    for (const auto& [key, rank] : rank_pattern) {
      TORCH_CHECK(rank > 0, where, ": rank_pattern gives '", key, "' the rank ", rank, "; it must be at least 1");
      const std::string problem = regex_problem(key);
      TORCH_CHECK(problem.empty(), where, ": the rank_pattern key ", problem);
    }
    for (const auto& [key, a] : alpha_pattern) {
      TORCH_CHECK(a > 0 && std::isfinite(a),
                  where,
                  ": alpha_pattern gives '",
                  key,
                  "' the alpha ",
                  a,
                  "; it must be a positive number");
      const std::string problem = regex_problem(key);
      TORCH_CHECK(problem.empty(), where, ": the alpha_pattern key ", problem);
    }
  }
};

}  // namespace qtrain::engine::lora
