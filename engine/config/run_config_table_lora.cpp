// The run config table's LoRA keys (Note [Run config table] in run_config_table.h).
#include <string>
#include <vector>

#include "engine/config/run_config_table.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

std::vector<RunConfigKey> lora_keys() {
  const std::string section = "LoRA";
  return {
      {"adapter",
       section,
       R"md(`lora` \| `qlora`)md",
       R"md(`qlora` if `load_in_4bit`, else `lora`)md",
       "axolotl",
       R"md(`qlora` is LoRA on a 4-bit base and requires `load_in_4bit: true`; `lora` with `load_in_4bit: true` is refused (write `qlora`). There is no full fine-tune.)md",
       [](const RunConfig& c) -> std::string { return c.adapter; }},
      {"lora_r",
       section,
       R"md(int in [1, 65536])md",
       R"md(`8`)md",
       "axolotl",
       R"md(The rank.)md",
       [](const RunConfig& c) -> std::string { return std::to_string(c.lora_r); }},
      {"lora_alpha",
       section,
       R"md(number > 0)md",
       R"md(`16`)md",
       "axolotl",
       R"md(The adapter output is scaled by `lora_alpha / lora_r` (or `/ sqrt(lora_r)` with rsLoRA).)md",
       [](const RunConfig& c) -> std::string { return format_double(c.lora_alpha); }},
      {"lora_dropout",
       section,
       R"md(number in [0, 1))md",
       R"md(`0.0`)md",
       "axolotl",
       R"md(Dropout on the adapter's input.)md",
       [](const RunConfig& c) -> std::string { return format_double(c.lora_dropout); }},
      {"lora_target_modules",
       section,
       R"md(list of names, or one string)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Modules that get adapters. A list: module names (`q_proj`) or dotted suffixes (`self_attn.q_proj`), letters, digits, `_` and `.` only; a module matches an entry it equals or ends with after a dot. One string: a regular expression that a module's whole name must match, as PEFT reads a string `target_modules` (`re.fullmatch`), e.g. axolotl's Gemma 4 example's `model.language_model.layers.[\d]+.(_checkpoint_wrapped_module.)?(mlp\|self_attn).(up\|down\|gate\|q\|k\|v\|o)_proj`. Names are those of the checkpoint: `model.layers.N.self_attn.q_proj`, or `model.language_model.layers.N...` in a multimodal Gemma 3/4 folder. It is read as ECMAScript (Python's common syntax; its `(?P<name>...)` groups and look-behind are refused by name), and the adapter's `adapter_config.json` keeps it as written. A bare name as the string (`q_proj`) matches no layer's module and is refused with the fix. On Qwen3-MoE and Mixtral a list is rewritten as PEFT rewrites it: transformers 4's names of the experts and router (`gate_proj` with `up_proj`, `down_proj`, `gate`; Mixtral's `w1`, `w3`, `w2`) become `lora_target_parameters` (MODELS.md).)md",
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
       [](const RunConfig& c) -> std::string { return yaml_bool(c.lora_target_linear); }},
      {"lora_target_parameters",
       section,
       R"md(list of names)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Parameters that get adapters, PEFT's `target_parameters`: the stacked experts of MoE layers, `[mlp.experts.gate_up_proj, mlp.experts.down_proj]` (Gemma 4: `[experts.gate_up_proj, experts.down_proj]`, or either spelling's common suffix; dotted suffixes, matched as modules are), and Qwen3-MoE's and Mixtral's routers, `gate.weight` (Gemma 4's router is a linear layer: `proj` in `lora_target_modules`). Needs `lora_dropout: 0` (PEFT refuses dropout there). Adapters are saved in PEFT's layout; see MODELS.md.)md",
       [](const RunConfig& c) { return yaml_list(c.lora_target_parameters); }},
      {"lora_modules_to_save",
       section,
       R"md(list of names)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(PEFT's `modules_to_save`: `embed_tokens` and / or `lm_head` (or a dotted suffix of their paths) trained in full beside the adapters, as float32 copies of the base's (used in the compute dtype) that the same optimizer, learning rate, clipping and weight decay train. Saved in the adapter as PEFT saves them (`base_model.model.model.embed_tokens.weight`, `base_model.model.lm_head.weight`; `modules_to_save` in `adapter_config.json`), resumed, and folded in by `qtrain merge`. With tied embeddings each listed module is a copy of its own, as in PEFT (its default `ensure_weight_tying: false`): listing both trains two copies that drift apart, and `qtrain merge` then writes `lm_head.weight` apart with `tie_word_embeddings: false`. Any other module is refused. With `lora_model_dir`, the adapter's copies load and entries it lacks start from the base. See MODELS.md.)md",
       [](const RunConfig& c) { return yaml_list(c.lora_modules_to_save); }},
      {"unfrozen_parameters",
       section,
       R"md(list of patterns)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Base parameters to train in full, as axolotl writes them: regular expressions in which `.` is literal unless `+` follows, matched from the start of a parameter's name, each optionally ending in a row range (`[32000:]`, `[:100]`, `[5]`) outside which the gradient stays zero. qtrain matches the base's names (`model.embed_tokens.weight`, `lm_head.weight`) and peft's (`base_model.model.…`; axolotl under an adapter sees only these, so base-name patterns match nothing there and it freezes everything, LoRA included). What matches trains as `lora_modules_to_save` does and is saved so in the adapter: the token embeddings and the output head only; a linear weight, a norm, a bias or a router that matches is refused by name, and a pattern matching nothing is reported in the run log (the adapters train as usual).)md",
       [](const RunConfig& c) { return yaml_list(c.unfrozen_parameters); }},
      {"peft_use_rslora",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Rank-stabilised LoRA: scale by `lora_alpha / sqrt(lora_r)`.)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.peft_use_rslora); }},
      {"peft_use_dora",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(DoRA (weight-decomposed LoRA, PEFT's `use_dora`): each adapted linear layer also trains a magnitude per output row, and its output is the LoRA-updated weight rescaled row by row to it, as PEFT 0.21 computes it (`Note [DoRA]` in `engine/lora/lora_linear.h`); saved as PEFT's `lora_magnitude_vector`, resumed, and folded in by `qtrain merge`. Linear layers only: with `lora_target_parameters` (MoE experts, and what `lora_target_linear` becomes on Qwen3-MoE and Mixtral) it is refused, as PEFT refuses it. Each adapted layer's forward makes a float32 copy of its base weight, as PEFT's does: slower than LoRA, and the memory plan counts the largest such copy. A new DoRA adapter cannot start on a sharded base (`shard_base`).)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.peft_use_dora); }},
      {"lora_rank_pattern",
       section,
       R"md(map of pattern to int)md",
       R"md(`{}`)md",
       "axolotl",
       R"md(PEFT's `rank_pattern`: a module's own rank. Each key is a regular expression matched against the end of a module name after a dot (PEFT's `re.match(r"(.*\.)?(KEY)$", name)`; for `lora_target_parameters` against `<module>.<parameter>`, e.g. `".*\\.gate_up_proj"`); the first key that matches, in the order written, wins, else `lora_r`. Written into the adapter's `adapter_config.json`, which PEFT reads sorted by key, so keep overlapping patterns in sorted order.)md",
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
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.lora_model_dir.string()); }},
  };
}

}  // namespace qtrain::engine::config
