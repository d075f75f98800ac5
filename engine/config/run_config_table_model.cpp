// The run config table's The base model and its quantization keys (Note [Run config table] in run_config_table.h).
#include <string>
#include <vector>

#include "engine/config/run_config_table.h"
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
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.base_model.string()); }},
      {"load_in_4bit",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Quantize the base's linear weights to 4 bits on load (QLoRA).)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.load_in_4bit); }},
      {"load_in_8bit",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Quantize the base's linear weights to LLM.int8() on load. Not together with `load_in_4bit`.)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.load_in_8bit); }},
      {"bnb_4bit_quant_type",
       section,
       R"md(`nf4` \| `fp4`)md",
       R"md(`nf4`)md",
       "BnB",
       R"md(The 4-bit code book.)md",
       [](const RunConfig& c) -> std::string { return c.bnb_4bit_quant_type; }},
      {"bnb_4bit_use_double_quant",
       section,
       R"md(bool)md",
       R"md(`true`)md",
       "BnB",
       R"md(Quantize the 4-bit absmax values again (8-bit, blocks of 256): about 0.37 fewer bits per weight.)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.bnb_4bit_use_double_quant); }},
      {"bnb_4bit_blocksize",
       section,
       R"md(int)md",
       R"md(`64`)md",
       "qtrain",
       R"md(Weights per 4-bit absmax block: a power of 2 from 32 to 4096.)md",
       [](const RunConfig& c) -> std::string { return std::to_string(c.bnb_4bit_blocksize); }},
      {"llm_int8_threshold",
       section,
       R"md(number >= 0)md",
       R"md(`6.0`)md",
       "BnB",
       R"md(With `int8_compute: llm_int8`, activation columns holding a value with magnitude >= this are computed in floating point.)md",
       [](const RunConfig& c) -> std::string { return format_double(c.llm_int8_threshold); }},
      {"int8_compute",
       section,
       R"md(`dequantize` \| `llm_int8`)md",
       R"md(`dequantize`)md",
       "qtrain",
       R"md(How an 8-bit linear computes: `dequantize` (the weight in the activation dtype and a float matmul, the most accurate) or `llm_int8` (int8 matmul with outlier decomposition). See FORMATS.md.)md",
       [](const RunConfig& c) -> std::string { return c.int8_compute; }},
      {"quantize_moe_experts",
       section,
       R"md(bool)md",
       R"md(`true`)md",
       "axolotl",
       R"md(MoE models (Qwen3-MoE, Mixtral, Gemma 4 with `enable_moe_block`): quantize the routed experts too, each expert's `gate_up` [2I, H] and `down` [H, I] on its own, as `load_in_4bit` / `load_in_8bit` say; `false` keeps them in the compute dtype. See MODELS.md.)md",
       [](const RunConfig& c) -> std::string { return yaml_bool(c.quantize_moe_experts); }},
      {"model_config",
       section,
       R"md(map)md",
       R"md(`{}`)md",
       "axolotl",
       R"md(Values that replace those of the model's `config.json` (axolotl's `model_config`; its older spelling `overrides_of_model_config` is read the same, and both at once are an error). qtrain reads two, for Qwen3-MoE and Mixtral: `output_router_logits` (bool: add the load-balancing loss to the training loss) and `router_aux_loss_coef` (number >= 0: its weight); any other key is refused (edit the model's `config.json`). Dense models ignore both, as transformers does. See MODELS.md.)md",
       [](const RunConfig& c) {
         std::vector<std::string> items;
         if (c.output_router_logits) items.push_back("output_router_logits: " + yaml_bool(*c.output_router_logits));
         if (c.router_aux_loss_coef) items.push_back("router_aux_loss_coef: " + format_double(*c.router_aux_loss_coef));
         return "{" + join(items, ", ") + "}";
       }},
  };
}

}  // namespace qtrain::engine::config
