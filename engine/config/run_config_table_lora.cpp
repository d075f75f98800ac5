// The run config table's keys of LoRA (Note [Run config table] in run_config_table.h).
#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "engine/config/config_entries.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_config_table.h"
#include "engine/config/run_limits.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"
#include "engine/lora/lora_config.h"

namespace qtrain::engine::config {

namespace {

// lora_rank_pattern / lora_alpha_pattern (`ranks`): a map of module-name patterns to a rank or an
// alpha, in the order written.
void read_pattern(Reader& r, RunConfig& c, const std::string& key, bool ranks) {
  r.guard({key}, [&] {
    const Entry* e = r.find(key);
    if (!e || e->value.IsNull()) return;
    const std::string example = key + (ranks ? ": {\".*\\\\.o_proj\": 32}" : ": {\"o_proj\": 64}");
    if (!e->value.IsMap())
      e->fail_value("expected a map of module-name patterns, got " + shown(e->value) + "; write e.g. " + example);
    const std::string prefix = e->key + ".";
    for (const Entry& inner : map_entries(e->value, e->origin, prefix)) {
      const std::string pattern = inner.key.substr(prefix.size());
      if (const std::string problem = lora::LoraConfig::regex_problem(pattern); !problem.empty()) {
        fail(inner.key_place(), inner.key, problem);
      }
      if (ranks) {
        c.lora_rank_pattern.emplace_back(
            pattern, r.integer_of(inner, between(1, kMaxLoraRank), "use a rank of 1 or more, typically 8 to 64"));
      } else {
        c.lora_alpha_pattern.emplace_back(
            pattern, r.number_of(inner, above(0), "use a positive number, commonly the module's rank or twice it"));
      }
    }
  });
}

}  // namespace

std::vector<RunConfigKey> lora_keys() {
  const std::string section = "LoRA";
  return {
      {"adapter",
       section,
       R"md(`lora` \| `qlora`)md",
       R"md(`qlora` if `load_in_4bit`, else `lora`)md",
       "axolotl",
       R"md(`qlora` is LoRA on a 4-bit base and requires `load_in_4bit: true`; `lora` with `load_in_4bit: true` is refused (write `qlora`). There is no full fine-tune.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         // axolotl's `adapter:` left blank means a full fine-tune, which qtrain does not do; that must
         // not turn into LoRA silently.
         r.guard({key}, [&] {
           if (const Entry* e = r.find_written(key); e && e->value.IsNull()) {
             fail(e->key_place(),
                  key,
                  "blank (axolotl's full fine-tune); qtrain trains LoRA adapters only, set adapter: lora or adapter: "
                  "qlora");
           }
         });
         c.adapter = r.choice(key, c.load_in_4bit ? "qlora" : "lora", {"lora", "qlora"});
         r.guard({key, "load_in_4bit"}, [&] {
           if (c.adapter == "qlora" && !c.load_in_4bit) {
             fail(r.place_of(key),
                  key,
                  "qlora needs load_in_4bit: true (it is false); set load_in_4bit: true, or use adapter: lora");
           }
         });
         r.guard({key, "load_in_4bit"}, [&] {
           if (c.adapter == "lora" && c.load_in_4bit) {
             fail(r.place_of(key),
                  key,
                  "lora with load_in_4bit: true is QLoRA; write adapter: qlora, or remove load_in_4bit");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.adapter; }},
      {"lora_r",
       section,
       R"md(int in [1, 65536])md",
       R"md(`8`)md",
       "axolotl",
       R"md(The rank.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lora_r = r.integer(key, c.lora_r, between(1, kMaxLoraRank), "use a rank of 1 or more, typically 8 to 64");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.lora_r); }},
      {"lora_alpha",
       section,
       R"md(number > 0)md",
       R"md(`16`)md",
       "axolotl",
       R"md(The adapter output is scaled by `lora_alpha / lora_r` (or `/ sqrt(lora_r)` with rsLoRA).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lora_alpha = r.number(key, c.lora_alpha, above(0), "use a positive number, commonly lora_r or 2 * lora_r");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.lora_alpha); }},
      {"lora_dropout",
       section,
       R"md(number in [0, 1))md",
       R"md(`0.0`)md",
       "axolotl",
       R"md(Dropout on the adapter's input.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lora_dropout =
             r.number(key, c.lora_dropout, unit_interval_open(), "use a value from 0 (off) to below 1, typically 0.05");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.lora_dropout); }},
      {"lora_target_modules",
       section,
       R"md(list of names, or one string)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Modules that get adapters. A list: module names (`q_proj`) or dotted suffixes (`self_attn.q_proj`), letters, digits, `_` and `.` only; a module matches an entry it equals or ends with after a dot. One string: a regular expression that a module's whole name must match, as PEFT reads a string `target_modules` (`re.fullmatch`), e.g. axolotl's Gemma 4 example's `model.language_model.layers.[\d]+.(_checkpoint_wrapped_module.)?(mlp\|self_attn).(up\|down\|gate\|q\|k\|v\|o)_proj`. Names are those of the checkpoint: `model.layers.N.self_attn.q_proj`, or `model.language_model.layers.N...` in a multimodal Gemma 3/4 folder. It is read as ECMAScript (Python's common syntax; its `(?P<name>...)` groups and look-behind are refused by name), and the adapter's `adapter_config.json` keeps it as written. A bare name as the string (`q_proj`) matches no layer's module and is refused with the fix. On Qwen3-MoE and Mixtral a list is rewritten as PEFT rewrites it: transformers 4's names of the experts and router (`gate_proj` with `up_proj`, `down_proj`, `gate`; Mixtral's `w1`, `w3`, `w2`) become `lora_target_parameters` (MODELS.md).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         auto targets = r.module_targets(key);
         c.lora_target_modules = std::move(targets.names);
         c.lora_target_modules_regex = std::move(targets.regex);
       },
       [](const RunConfig& c) {
         return c.lora_target_modules_regex.empty() ? yaml_list(c.lora_target_modules)
                                                    : yaml_quoted(c.lora_target_modules_regex);
       }},
      {"lora_target_linear",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Every linear layer except `lm_head` gets an adapter (PEFT's `all-linear`); combined with `lora_target_modules`, a module matching either is targeted. One of the two must target something. It adapts what PEFT's `all-linear` adapts on the base's architecture: on Gemma 4 with experts also the router's `router.proj`; on Qwen3-MoE and Mixtral the attention, the routers and the experts, `gate_up_proj` at twice `lora_r` and `lora_alpha` (MODELS.md, "`all-linear` on mixture-of-experts models").)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lora_target_linear = r.boolean(key, c.lora_target_linear);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.lora_target_linear); }},
      {"lora_target_parameters",
       section,
       R"md(list of names)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Parameters that get adapters, PEFT's `target_parameters`: the stacked experts of MoE layers, `[mlp.experts.gate_up_proj, mlp.experts.down_proj]` (Gemma 4: `[experts.gate_up_proj, experts.down_proj]`, or either spelling's common suffix; dotted suffixes, matched as modules are), and Qwen3-MoE's and Mixtral's routers, `gate.weight` (Gemma 4's router is a linear layer: `proj` in `lora_target_modules`). Needs `lora_dropout: 0` (PEFT refuses dropout there). Adapters are saved in PEFT's layout; see MODELS.md.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lora_target_parameters = r.module_names(key);
         r.guard({"lora_target_modules", "lora_target_linear", key}, [&] {
           if (c.lora_target_modules.empty() && c.lora_target_modules_regex.empty() && !c.lora_target_linear &&
               c.lora_target_parameters.empty()) {
             const std::string key = r.find_written("lora_target_modules")  ? "lora_target_modules"
                                     : r.find_written("lora_target_linear") ? "lora_target_linear"
                                                                            : "lora_target_modules";
             fail(r.place_of(key),
                  key,
                  "no LoRA target modules; list them (lora_target_modules: [q_proj, k_proj, v_proj, o_proj]) "
                  "or target every linear layer (lora_target_linear: true)");
           }
         });
         r.guard({key, "lora_dropout"}, [&] {
           if (!c.lora_target_parameters.empty() && c.lora_dropout > 0) {
             fail(r.place_of("lora_dropout"),
                  "lora_dropout",
                  "LoRA on parameters (lora_target_parameters, MoE experts) has no dropout, as in PEFT, which refuses "
                  "it; "
                  "set lora_dropout: 0");
           }
         });
       },
       [](const RunConfig& c) { return yaml_list(c.lora_target_parameters); }},
      {"lora_modules_to_save",
       section,
       R"md(list of names)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(PEFT's `modules_to_save`: `embed_tokens`, `lm_head` and norms trained in full beside the adapters; an entry names every module whose path ends with it, as in PEFT (`norm` names every norm of the model, `input_layernorm` each layer's, `model.layers.0.input_layernorm` one). They train as float32 copies of the base's (used in the compute dtype) that the same optimizer, learning rate, clipping and weight decay train. Saved in the adapter as PEFT saves them (`base_model.model.model.embed_tokens.weight`, `base_model.model.lm_head.weight`, `base_model.model.model.layers.0.input_layernorm.weight`; `modules_to_save` in `adapter_config.json`), resumed, and folded in by `qtrain merge`. With tied embeddings each listed module is a copy of its own, as in PEFT (its default `ensure_weight_tying: false`): listing both trains two copies that drift apart, and `qtrain merge` then writes `lm_head.weight` apart with `tie_word_embeddings: false`. Any other module is refused. With `lora_model_dir`, the adapter's copies load and entries it lacks start from the base. See MODELS.md.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lora_modules_to_save = r.module_names(key);
         r.guard({key}, [&] {
           for (const std::string& m : c.lora_modules_to_save) {
             if (!lora::LoraConfig::names_trainable_in_full(m)) {
               fail(r.place_of(key), key, "names '" + m + "'; " + lora::LoraConfig::kTrainableInFull);
             }
           }
         });
       },
       [](const RunConfig& c) { return yaml_list(c.lora_modules_to_save); }},
      {"unfrozen_parameters",
       section,
       R"md(list of patterns)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Base parameters to train in full, as axolotl writes them: regular expressions in which `.` is literal unless `+` follows, matched from the start of a parameter's name, each optionally ending in a row range (`[32000:]`, `[:100]`, `[5]`) outside which the gradient stays zero. qtrain matches the base's names (`model.embed_tokens.weight`, `lm_head.weight`) and peft's (`base_model.model.…`; axolotl under an adapter sees only these, so base-name patterns match nothing there and it freezes everything, LoRA included). What matches trains as `lora_modules_to_save` does and is saved so in the adapter (its module path joins `modules_to_save`): the token embeddings, the output head and the norms (a row range only on the first two); a linear weight, a bias or a router that matches is refused by name, with why, and a pattern matching nothing is reported in the run log (the adapters train as usual).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.unfrozen_parameters = r.strings(key, "[^lm_head.weight$, ^model.embed_tokens.weight$[32000:]]");
       },
       [](const RunConfig& c) { return yaml_list(c.unfrozen_parameters); }},
      {"peft_use_rslora",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Rank-stabilised LoRA: scale by `lora_alpha / sqrt(lora_r)`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.peft_use_rslora = r.boolean(key, c.peft_use_rslora); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.peft_use_rslora); }},
      {"peft_use_dora",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(DoRA (weight-decomposed LoRA, PEFT's `use_dora`): each adapted linear layer also trains a magnitude per output row, and its output is the LoRA-updated weight rescaled row by row to it, as PEFT 0.21 computes it (`Note [DoRA]` in `engine/lora/lora_linear.h`); saved as PEFT's `lora_magnitude_vector`, resumed, and folded in by `qtrain merge`. Linear layers only: with `lora_target_parameters` (MoE experts, and what `lora_target_linear` becomes on Qwen3-MoE and Mixtral) it is refused, as PEFT refuses it. Each adapted layer's forward makes a float32 copy of its base weight, as PEFT's does: slower than LoRA, and the memory plan counts the largest such copy. A new DoRA adapter cannot start on a sharded base (`shard_base`).)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.peft_use_dora = r.boolean(key, c.peft_use_dora); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.peft_use_dora); }},
      {"lora_rank_pattern",
       section,
       R"md(map of pattern to int)md",
       R"md(`{}`)md",
       "axolotl",
       R"md(PEFT's `rank_pattern`: a module's own rank. Each key is a regular expression matched against the end of a module name after a dot (PEFT's `re.match(r"(.*\.)?(KEY)$", name)`; for `lora_target_parameters` against `<module>.<parameter>`, e.g. `".*\\.gate_up_proj"`); the first key that matches, in the order written, wins, else `lora_r`. Written into the adapter's `adapter_config.json`, which PEFT reads sorted by key, so keep overlapping patterns in sorted order.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { read_pattern(r, c, key, /*ranks=*/true); },
       [](const RunConfig& c) {
         std::vector<std::string> items;
         for (const auto& [pattern, rank] : c.lora_rank_pattern)
           items.push_back(yaml_quoted(pattern) + ": " + std::to_string(rank));
         return "{" + join(items, ", ") + "}";
       }},
      {"lora_alpha_pattern",
       section,
       R"md(map of pattern to number)md",
       R"md(`{}`)md",
       "axolotl",
       R"md(PEFT's `alpha_pattern`: a module's own `lora_alpha`, matched as `lora_rank_pattern`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { read_pattern(r, c, key, /*ranks=*/false); },
       [](const RunConfig& c) {
         std::vector<std::string> items;
         for (const auto& [pattern, alpha] : c.lora_alpha_pattern)
           items.push_back(yaml_quoted(pattern) + ": " + format_double(alpha));
         return "{" + join(items, ", ") + "}";
       }},
      {"lora_model_dir",
       section,
       R"md(path)md",
       R"md(none)md",
       "axolotl",
       R"md(A PEFT adapter folder to start from instead of fresh adapters.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.lora_model_dir = r.path(key, c.lora_model_dir); },
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.lora_model_dir.string()); }},
  };
}

}  // namespace qtrain::engine::config
