// The run config table's keys of the base model and its quantization (Note [Run config table] in run_config_table.h).
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

namespace qtrain::engine::config {

std::vector<RunConfigKey> model_keys() {
  const std::string section = "Base model and quantization";
  return {
      {"base_model",
       section,
       R"md(path)md",
       R"md(required)md",
       "axolotl",
       R"md(A local Hugging Face model folder (`config.json` + safetensors). Not a Hub id.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.base_model = r.path(key, "");
         r.guard({key}, [&] {
           TORCH_CHECK(
               !c.base_model.empty(),
               r.place_of(key),
               ": base_model: missing; set it to a local Hugging Face model folder, e.g. base_model: ./models/llama");
         });
       },
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.base_model.string()); }},
      {"load_in_4bit",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Quantize the base's linear weights to 4 bits on load (QLoRA).)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.load_in_4bit = r.boolean(key, c.load_in_4bit); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.load_in_4bit); }},
      {"load_in_8bit",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Quantize the base's linear weights to LLM.int8() on load. Not together with `load_in_4bit`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.load_in_8bit = r.boolean(key, c.load_in_8bit);
         r.guard({key, "load_in_4bit"}, [&] {
           if (c.load_in_4bit && c.load_in_8bit) {
             fail(r.place_of(key),
                  key,
                  "load_in_4bit (" + r.place_of("load_in_4bit") +
                      ") and load_in_8bit are both true; choose one quantization of the base (4-bit for QLoRA)");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.load_in_8bit); }},
      {"bnb_4bit_quant_type",
       section,
       R"md(`nf4` \| `fp4`)md",
       R"md(`nf4`)md",
       "BnB",
       R"md(The 4-bit code book.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.bnb_4bit_quant_type = r.choice(key, c.bnb_4bit_quant_type, {"nf4", "fp4"});
       },
       [](const RunConfig& c) -> std::string { return c.bnb_4bit_quant_type; }},
      {"bnb_4bit_use_double_quant",
       section,
       R"md(bool)md",
       R"md(`true`)md",
       "BnB",
       R"md(Quantize the 4-bit absmax values again (8-bit, blocks of 256): about 0.37 fewer bits per weight.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.bnb_4bit_use_double_quant = r.boolean(key, c.bnb_4bit_use_double_quant);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.bnb_4bit_use_double_quant); }},
      {"bnb_4bit_blocksize",
       section,
       R"md(int)md",
       R"md(`64`)md",
       "qtrain",
       R"md(Weights per 4-bit absmax block: a power of 2 from 32 to 4096.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.bnb_4bit_blocksize = r.integer(key,
                                          c.bnb_4bit_blocksize,
                                          Range{.lo = 32, .hi = 4096},
                                          "use a power of 2 from 32 to 4096 (64 is bitsandbytes' default)");
         r.guard({key}, [&] {
           if (const int64_t b = c.bnb_4bit_blocksize; (b & (b - 1)) != 0) {
             c.bnb_4bit_blocksize = 64;
             r.find(key)->fail_value(std::to_string(b) +
                                     " is not a power of 2; use 32, 64, 128, ..., 4096 (64 is bitsandbytes' default)");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.bnb_4bit_blocksize); }},
      {"llm_int8_threshold",
       section,
       R"md(number >= 0)md",
       R"md(`6.0`)md",
       "BnB",
       R"md(With `int8_compute: llm_int8`, activation columns holding a value with magnitude >= this are computed in floating point.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.llm_int8_threshold =
             r.number(key,
                      c.llm_int8_threshold,
                      at_least(0),
                      "use a magnitude such as 6.0 (bitsandbytes' default); 0 computes every column in int8");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.llm_int8_threshold); }},
      {"int8_compute",
       section,
       R"md(`dequantize` \| `llm_int8`)md",
       R"md(`dequantize`)md",
       "qtrain",
       R"md(How an 8-bit linear computes: `dequantize` (the weight in the activation dtype and a float matmul, the most accurate) or `llm_int8` (int8 matmul with outlier decomposition). See FORMATS.md.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.int8_compute = r.choice(key, c.int8_compute, {"dequantize", "llm_int8"});
       },
       [](const RunConfig& c) -> std::string { return c.int8_compute; }},
      {"quantize_moe_experts",
       section,
       R"md(bool)md",
       R"md(`true`)md",
       "axolotl",
       R"md(MoE models (Qwen3-MoE, Mixtral, Gemma 4 with `enable_moe_block`): quantize the routed experts too, each expert's `gate_up` [2I, H] and `down` [H, I] on its own, as `load_in_4bit` / `load_in_8bit` say; `false` keeps them in the compute dtype. See MODELS.md.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.quantize_moe_experts = r.boolean(key, c.quantize_moe_experts);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.quantize_moe_experts); }},
      {"model_config",
       section,
       R"md(map)md",
       R"md(`{}`)md",
       "axolotl",
       R"md(Values that replace those of the model's `config.json` (axolotl's `model_config`; its older spelling `overrides_of_model_config` is read the same, and both at once are an error). qtrain reads two, for Qwen3-MoE and Mixtral: `output_router_logits` (bool: add the load-balancing loss to the training loss) and `router_aux_loss_coef` (number >= 0: its weight); any other key is refused (edit the model's `config.json`). Dense models ignore both, as transformers does. See MODELS.md.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key, "overrides_of_model_config"}, [&] {
           const Entry* e = r.find(key);
           // axolotl's older spelling of the same map.
           if (const Entry* older = r.find("overrides_of_model_config")) {
             if (e) {
               fail(older->key_place(),
                    older->key,
                    "model_config is given too (at " + e->key_place() +
                        "); overrides_of_model_config is its older spelling: keep one of them");
             }
             e = older;
           }
           if (!e) return;
           const std::string example = e->key + ": {output_router_logits: true}";
           if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
           const std::string prefix = e->key + ".";
           for (const Entry& inner : map_entries(e->value, e->origin, prefix)) {
             const std::string name = inner.key.substr(prefix.size());
             if (name == "output_router_logits") {
               c.output_router_logits = r.boolean_of(inner);
             } else if (name == "router_aux_loss_coef") {
               c.router_aux_loss_coef =
                   r.number_of(inner, at_least(0), "use a coefficient such as 0.001 (transformers' default) or 0.02");
             } else {
               fail(inner.key_place(),
                    inner.key,
                    "qtrain reads only output_router_logits and router_aux_loss_coef from model_config; change other "
                    "values in the model's config.json");
             }
           }
         });
       },
       [](const RunConfig& c) {
         std::vector<std::string> items;
         if (c.output_router_logits) items.push_back("output_router_logits: " + yaml_bool(*c.output_router_logits));
         if (c.router_aux_loss_coef) items.push_back("router_aux_loss_coef: " + format_double(*c.router_aux_loss_coef));
         return "{" + join(items, ", ") + "}";
       }},
  };
}

}  // namespace qtrain::engine::config
