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
       R"md(`dpo` \| `ipo` \| `orpo` \| `simpo` \| `kto`)md",
       R"md(none)md",
       "axolotl",
       R"md(Preference tuning instead of supervised fine-tuning, on pairs of a prompt with a chosen and a rejected completion, as TRL 1.16 computes each objective: `dpo` DPO's sigmoid loss and `ipo` IPO's (DPOTrainer), against a reference that is the model the run starts from: the base itself, the same quantized layers with the adapter switched off (no second model), or with `lora_model_dir` the base with that adapter, as TRL's `ref` copy; `orpo` ORPO's odds-ratio loss with the chosen rows' NLL (ORPOTrainer) and `simpo` SimPO's (CPOTrainer with `loss_type: simpo`), which need no reference; `kto` KTO's loss (KTOTrainer) on unpaired rows, each a prompt with one completion labelled desirable or not, against the same reference and a KL estimate from each micro-batch's mismatched prompts and completions. The data: TRL's rows, `prompt`, `chosen` and `rejected` (for `kto`: `prompt`, `completion` and a boolean `label`, or pairs, which it unpairs as TRL does) as text or conversations (rendered with `chat_template`) or pre-tokenized (`prompt_ids`, `chosen_ids`, `rejected_ids`; `prompt_ids`, `completion_ids`, `label`), tokenized as TRL's trainers do, each row truncated to `sequence_len` keeping its start. See PREFERENCE.md. Absent or null: supervised fine-tuning.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.rl = r.choice(key, c.rl, {"dpo", "ipo", "orpo", "simpo", "kto"}, "use dpo, ipo, orpo, simpo or kto");
       },
       [](const RunConfig& c) -> std::string { return c.rl.empty() ? "null" : c.rl; }},
      {"rl_beta",
       section,
       R"md(number > 0)md",
       R"md(`0.1`)md",
       "axolotl",
       R"md(DPO's beta (TRL's `beta`): how far the trained model may move from the reference; larger keeps it closer. For `ipo`, the regularisation tau; for `simpo`, the scale of the reward (CPOTrainer's `beta`; the SimPO paper uses 2 to 10); for `kto`, KTOTrainer's `beta`. `orpo` reads `orpo_alpha` instead, as axolotl passes it.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.rl_beta = r.number(key, c.rl_beta, above(0), "use a positive beta, e.g. 0.1 (TRL's default)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.rl_beta); }},
      {"orpo_alpha",
       section,
       R"md(number > 0)md",
       R"md(`0.1`)md",
       "axolotl",
       R"md(ORPO's weight of the odds-ratio term beside the NLL (ORPOTrainer's `beta`, which axolotl sets from this key).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.orpo_alpha = r.number(key, c.orpo_alpha, above(0), "use a positive weight, e.g. 0.1 (TRL's default)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.orpo_alpha); }},
      {"simpo_gamma",
       section,
       R"md(number >= 0)md",
       R"md(`0.5`)md",
       "axolotl",
       R"md(SimPO's target reward margin: the loss is `-log sigmoid(beta * (avg_chosen - avg_rejected) - simpo_gamma)` over the completions' mean log-probabilities per token.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.simpo_gamma =
             r.number(key, c.simpo_gamma, at_least(0), "use a margin of 0 or more, e.g. 0.5 (TRL's default)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.simpo_gamma); }},
      {"cpo_alpha",
       section,
       R"md(number >= 0)md",
       R"md(`1.0`)md",
       "axolotl",
       R"md(The weight of the chosen completions' NLL added to SimPO's loss (CPOTrainer's default 1, CPO-SimPO); `0` is the SimPO paper's loss alone.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.cpo_alpha = r.number(key, c.cpo_alpha, at_least(0), "use a weight of 0 or more (TRL's default is 1)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.cpo_alpha); }},
      {"kto_desirable_weight",
       section,
       R"md(number > 0)md",
       R"md(`1.0`)md",
       "axolotl",
       R"md(KTO's weight of the desirable rows' losses (KTOTrainer's `desirable_weight`). With unequal counts of desirable and undesirable rows, TRL advises weights that make `desirable_weight * desirable` 1 to 1.33 times `undesirable_weight * undesirable`; qtrain prints the same advice.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.kto_desirable_weight =
             r.number(key, c.kto_desirable_weight, above(0), "use a positive weight, e.g. 1.0 (TRL's default)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.kto_desirable_weight); }},
      {"kto_undesirable_weight",
       section,
       R"md(number > 0)md",
       R"md(`1.0`)md",
       "axolotl",
       R"md(KTO's weight of the undesirable rows' losses (KTOTrainer's `undesirable_weight`).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.kto_undesirable_weight =
             r.number(key, c.kto_undesirable_weight, above(0), "use a positive weight, e.g. 1.0 (TRL's default)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.kto_undesirable_weight); }},
      {"precompute_ref_log_probs",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "TRL",
       R"md(`dpo`, `ipo` and `kto`: compute the reference's log-likelihoods of every pair (training and held-out; KTO's rows and their KL rows) in one pass before the first step, as TRL's DPOTrainer and KTOTrainer do, and read them in the steps instead of running the reference forward in each micro-batch (one forward fewer per micro-batch). A resumed run computes them again. Needs `rl: dpo`, `ipo` or `kto`. See PREFERENCE.md.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.precompute_ref_log_probs = r.boolean(key, c.precompute_ref_log_probs);
       },
       [](const RunConfig& c) -> std::string { return c.precompute_ref_log_probs ? "true" : "false"; }},
      {"precompute_ref_batch_size",
       section,
       R"md(int >= 0)md",
       R"md(`0`)md",
       "TRL",
       R"md(Pairs per forward of `precompute_ref_log_probs`' pass; `0`: `micro_batch_size` (TRL's default, `per_device_train_batch_size`).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.precompute_ref_batch_size = r.integer(
             key, c.precompute_ref_batch_size, between(0, 1 << 20), "use a number of pairs, or 0 for micro_batch_size");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.precompute_ref_batch_size); }},
  };
}

}  // namespace qtrain::engine::config
