// The run config table's keys of preference tuning (Note [Run config table] in
// run_config_table.h).
#include <string>
#include <vector>

#include "engine/config/config_entries.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_config_table.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

std::vector<RunConfigKey> preference_keys() {
  const std::string section = "Preference tuning";
  return {
      {"rl",
       section,
       R"md(`dpo` \| `ipo`)md",
       R"md(none)md",
       "axolotl",
       R"md(Preference tuning instead of supervised fine-tuning: `dpo` trains on pairs of a prompt with a chosen and a rejected completion with DPO's sigmoid loss, `ipo` with IPO's, as TRL's DPOTrainer computes them; the reference is the base itself, the same quantized layers with the adapter switched off (no second model). The data: pre-tokenized pairs (`prompt_ids`, `chosen_ids`, `rejected_ids`), each row truncated to `sequence_len` keeping its start. See PREFERENCE.md. Absent or null: supervised fine-tuning. KTO, ORPO and SimPO are not built yet.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.rl = r.choice(key, c.rl, {"dpo", "ipo"}, "use dpo or ipo (KTO, ORPO and SimPO are not built yet)");
       },
       [](const RunConfig& c) -> std::string { return c.rl.empty() ? "null" : c.rl; }},
      {"rl_beta",
       section,
       R"md(number > 0)md",
       R"md(`0.1`)md",
       "axolotl",
       R"md(DPO's beta (TRL's `beta`): how far the trained model may move from the reference; larger keeps it closer. For `ipo`, the regularisation tau.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.rl_beta = r.number(key, c.rl_beta, above(0), "use a positive beta, e.g. 0.1 (TRL's default)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.rl_beta); }},
  };
}

}  // namespace qtrain::engine::config
