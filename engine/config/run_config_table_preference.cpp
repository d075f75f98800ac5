// The run config table's keys of preference tuning (Note [Run config table] in
// run_config_table.h).
#include <algorithm>
#include <string>
#include <vector>

#include "engine/config/config_entries.h"
#include "engine/config/config_reader.h"
#include "engine/config/key_suggestion.h"
#include "engine/config/run_config.h"
#include "engine/config/run_config_table.h"
#include "engine/config/yaml_place.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

namespace {

// TRL 1.16's DPO losses (DPOTrainer's loss_type; engine/train/preference_loss.h computes them).
const std::vector<std::string> kDpoLossTypes = {"sigmoid",
                                                "hinge",
                                                "ipo",
                                                "sigmoid_norm",
                                                "robust",
                                                "exo_pair",
                                                "nca_pair",
                                                "bco_pair",
                                                "sppo_hard",
                                                "apo_zero",
                                                "apo_down",
                                                "discopop",
                                                "aot",
                                                "aot_unpaired",
                                                "sft"};

// The losses that take another f-divergence than reverse_kl (TRL 1.16's f_divergence_loss_types:
// those built on the difference of the chosen and rejected log-ratios).
const std::vector<std::string> kFDivergenceLossTypes = {
    "sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft"};

// DPOTrainer's keys are rl: dpo's and rl: ipo's (ipo is DPOTrainer with loss_type ipo): `key`
// (whose value is not its default, `set`) is refused with another rl.
void refuse_outside_dpo(Reader& r, const RunConfig& c, const std::string& key, bool set) {
  r.guard({key, "rl"}, [&] {
    if (set && c.rl != "dpo" && c.rl != "ipo") {
      fail(r.place_of(key),
           key,
           "is DPOTrainer's (rl: dpo or ipo), and rl is " + (c.rl.empty() ? std::string("not set") : c.rl) +
               "; remove the key");
    }
  });
}

// The names of the run's DPO losses (dpo_losses').
std::vector<std::string> dpo_loss_names(const RunConfig& c) {
  std::vector<std::string> names;
  for (const auto& [name, weight] : dpo_losses(c)) names.push_back(name);
  return names;
}

}  // namespace

std::vector<RunConfigKey> preference_keys() {
  const std::string section = "Preference tuning";
  return {
      {"rl",
       section,
       R"md(`dpo` \| `ipo` \| `orpo` \| `simpo` \| `kto`)md",
       R"md(none)md",
       "axolotl",
       R"md(Preference tuning instead of supervised fine-tuning, on pairs of a prompt with a chosen and a rejected completion, as TRL 1.16 computes each objective: `dpo` DPO's sigmoid loss, or the losses `dpo_loss_type` lists, and `ipo` IPO's (DPOTrainer), against a reference that is the model the run starts from: the base itself, the same quantized layers with the adapter switched off (no second model), or with `lora_model_dir` the base with that adapter, as TRL's `ref` copy; `orpo` ORPO's odds-ratio loss with the chosen rows' NLL (ORPOTrainer) and `simpo` SimPO's (CPOTrainer with `loss_type: simpo`), which need no reference; `kto` KTO's loss (KTOTrainer) on unpaired rows, each a prompt with one completion labelled desirable or not, against the same reference and a KL estimate from each micro-batch's mismatched prompts and completions. The data: TRL's rows, `prompt`, `chosen` and `rejected` (for `kto`: `prompt`, `completion` and a boolean `label`, or pairs, which it unpairs as TRL does) as text or conversations (rendered with `chat_template`) or pre-tokenized (`prompt_ids`, `chosen_ids`, `rejected_ids`; `prompt_ids`, `completion_ids`, `label`), tokenized as TRL's trainers do, each row truncated to `sequence_len` keeping its start. See PREFERENCE.md. Absent or null: supervised fine-tuning.)md",
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
      {"dpo_loss_type",
       section,
       R"md(list of DPO losses)md",
       R"md(`[sigmoid]`)md",
       "axolotl",
       R"md(`rl: dpo`'s losses by TRL 1.16's names (DPOTrainer's `loss_type`), summed with `dpo_loss_weights`: `sigmoid` (DPO), `hinge`, `ipo`, `sigmoid_norm` (DPO on per-token log-ratios), `robust`, `exo_pair`, `nca_pair`, `bco_pair`, `sppo_hard`, `apo_zero`, `apo_down`, `discopop`, `aot`, `aot_unpaired`, and `sft` (the chosen completions' NLL; `[sigmoid, sft]` with weights `[1, alpha]` is RPO, `[sigmoid, bco_pair, sft]` MPO). The formulas are in PREFERENCE.md. `rl: ipo` is `rl: dpo` with `dpo_loss_type: [ipo]`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.dpo_loss_type = r.strings(key, "[sigmoid, sft]");
         r.guard({key}, [&] {
           for (const auto& name : c.dpo_loss_type) {
             if (std::find(kDpoLossTypes.begin(), kDpoLossTypes.end(), name) == kDpoLossTypes.end()) {
               const auto suggestion = nearest(name, kDpoLossTypes);
               fail(r.place_of(key),
                    key,
                    "'" + name + "' is not one of TRL's DPO losses (" + join(kDpoLossTypes, ", ") + ")" +
                        (suggestion ? "; did you mean '" + *suggestion + "'?" : "; use one of them"));
             }
           }
         });
         r.guard({key, "rl"}, [&] {
           if (!c.dpo_loss_type.empty() && c.rl != "dpo") {
             fail(r.place_of(key),
                  key,
                  "chooses rl: dpo's losses, and rl is " + (c.rl.empty() ? std::string("not set") : c.rl) +
                      (c.rl == "ipo"
                           ? "; write rl: dpo (rl: ipo is rl: dpo with dpo_loss_type: [ipo]: list ipo to keep it)"
                           : "; set rl: dpo or remove the key"));
           }
         });
       },
       [](const RunConfig& c) { return yaml_list(c.dpo_loss_type); }},
      {"dpo_loss_weights",
       section,
       R"md(list of numbers >= 0)md",
       R"md(`1` each)md",
       "axolotl",
       R"md(The weight of each of `dpo_loss_type`'s losses, in its order (DPOTrainer's `loss_weights`): the loss is the sum of weight times the loss's mean over the micro-batch's pairs.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.dpo_loss_weights =
             r.numbers(key, at_least(0), "write one weight of 0 or more per dpo_loss_type, e.g. [1, 0.2]");
         r.guard({key, "rl"}, [&] {
           if (!c.dpo_loss_weights.empty() && c.rl != "dpo") {
             fail(r.place_of(key),
                  key,
                  "weighs rl: dpo's losses, and rl is " + (c.rl.empty() ? std::string("not set") : c.rl) +
                      "; set rl: dpo (with dpo_loss_type), or remove the key");
           }
         });
         r.guard({key, "dpo_loss_type"}, [&] {
           const size_t losses = std::max<size_t>(1, c.dpo_loss_type.size());
           if (!c.dpo_loss_weights.empty() && c.dpo_loss_weights.size() != losses) {
             fail(r.place_of(key),
                  key,
                  std::to_string(c.dpo_loss_weights.size()) + " weights for " + std::to_string(losses) +
                      " losses (dpo_loss_type); give one weight per loss, in its order");
           }
         });
       },
       [](const RunConfig& c) { return yaml_numbers(c.dpo_loss_weights); }},
      {"dpo_label_smoothing",
       section,
       R"md(number in [0, 1))md",
       R"md(`0`)md",
       "axolotl",
       R"md(TRL's `label_smoothing`, which TRL 1.16 reads only in the `robust` loss (the probability that a pair's preference is flipped, in [0, 0.5); the Robust DPO paper uses 0.1), `exo_pair` (its epsilon, above 0; the EXO paper uses 1e-3), `aot` and `aot_unpaired`. With none of them among `dpo_loss_type` a value above 0 is refused, since it would change nothing (older TRL smoothed the `sigmoid` loss; TRL 1.16 does not).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.dpo_label_smoothing =
             r.number(key, c.dpo_label_smoothing, unit_interval_open(), "use a probability below 1, e.g. 0.1");
         const auto losses = dpo_loss_names(c);
         const auto uses = [&](const std::string& name) {
           return std::find(losses.begin(), losses.end(), name) != losses.end();
         };
         r.guard({key, "rl"}, [&] {
           if (c.dpo_label_smoothing > 0 && c.rl != "dpo") {
             fail(r.place_of(key),
                  key,
                  "is rl: dpo's (DPOTrainer's label_smoothing), and rl is " +
                      (c.rl.empty() ? std::string("not set") : c.rl) + "; remove the key");
           }
         });
         r.guard({key, "dpo_loss_type", "rl"}, [&] {
           if (c.dpo_label_smoothing > 0 && c.rl == "dpo" && !uses("robust") && !uses("exo_pair") && !uses("aot") &&
               !uses("aot_unpaired")) {
             fail(r.place_of(key),
                  key,
                  format_double(c.dpo_label_smoothing) +
                      " changes nothing: TRL 1.16 reads it only in the robust, "
                      "exo_pair, aot and aot_unpaired losses, and dpo_loss_type is [" +
                      join(losses, ", ") +
                      "]; remove the key, or list one of those losses (older TRL's smoothed sigmoid loss, cDPO, is "
                      "not among TRL 1.16's)");
           }
         });
         r.guard({key, "dpo_loss_type"}, [&] {
           if (uses("robust") && c.dpo_label_smoothing >= 0.5) {
             fail(r.place_of(key), key, "robust's flip probability must be below 0.5; use e.g. 0.1");
           }
           if (uses("exo_pair") && c.dpo_label_smoothing == 0) {
             fail(r.place_of(key),
                  key,
                  "exo_pair needs an epsilon above 0 (TRL refuses 0); use e.g. 0.001 (the EXO paper's)");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return format_double(c.dpo_label_smoothing); }},
      {"discopop_tau",
       section,
       R"md(number > 0)md",
       R"md(`0.05`)md",
       "TRL",
       R"md(The temperature of the `discopop` loss (DPOTrainer's `discopop_tau`; the DiscoPOP paper's 0.05). Another value is refused without `discopop` among `dpo_loss_type`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.discopop_tau = r.number(key, c.discopop_tau, above(0), "use a positive temperature, e.g. 0.05");
         r.guard({key, "dpo_loss_type"}, [&] {
           if (c.discopop_tau != RunConfig{}.discopop_tau &&
               std::find(c.dpo_loss_type.begin(), c.dpo_loss_type.end(), "discopop") == c.dpo_loss_type.end()) {
             fail(r.place_of(key), key, "is discopop's, which dpo_loss_type does not list; remove the key");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return format_double(c.discopop_tau); }},
      {"f_divergence_type",
       section,
       R"md(`reverse_kl` \| `forward_kl` \| `js_divergence` \| `alpha_divergence`)md",
       R"md(`reverse_kl`)md",
       "TRL",
       R"md(f-DPO's divergence between the trained model and the reference (DPOTrainer's `f_divergence_type`): the losses built on the difference of the chosen and rejected log-ratios (`sigmoid`, `sigmoid_norm`, `hinge`, `ipo`, `exo_pair`, `robust`, `discopop`; `sft` reads no ratio) take it between the ratios' scores instead, `1 - exp(-logratio)` for `forward_kl`, `ln 2 + log sigmoid(logratio)` for `js_divergence`, `(exp((a - 1) logratio) - 1) / (a - 1)` for `alpha_divergence` with `a` = `f_alpha_divergence_coef`; `reverse_kl` is DPO's log-ratio itself. With another loss listed in `dpo_loss_type` only `reverse_kl` is accepted, as TRL refuses the rest. `rl: dpo` and `ipo`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.f_divergence_type =
             r.choice(key, c.f_divergence_type, {"reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"}, "");
         const bool set = c.f_divergence_type != RunConfig{}.f_divergence_type;
         refuse_outside_dpo(r, c, key, set);
         r.guard({key, "dpo_loss_type", "rl"}, [&] {
           if (!set) return;
           std::vector<std::string> others;
           for (const auto& name : dpo_loss_names(c)) {
             if (std::find(kFDivergenceLossTypes.begin(), kFDivergenceLossTypes.end(), name) ==
                 kFDivergenceLossTypes.end()) {
               others.push_back(name);
             }
           }
           if (!others.empty()) {
             fail(r.place_of(key),
                  key,
                  c.f_divergence_type + " has no form for the " + join(others, ", ") +
                      " loss (TRL 1.16 refuses it); use reverse_kl with it, or list only " +
                      join(kFDivergenceLossTypes, ", ") + " in dpo_loss_type");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.f_divergence_type; }},
      {"f_alpha_divergence_coef",
       section,
       R"md(number)md",
       R"md(`0.5`)md",
       "TRL",
       R"md(The `a` of `f_divergence_type: alpha_divergence` (DPOTrainer's `f_alpha_divergence_coef`); `1` is `reverse_kl`. Another value is refused with another divergence.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.f_alpha_divergence_coef =
             r.number(key, c.f_alpha_divergence_coef, between(-1e6, 1e6), "use a coefficient, e.g. 0.5");
         r.guard({key, "f_divergence_type"}, [&] {
           if (c.f_alpha_divergence_coef != RunConfig{}.f_alpha_divergence_coef &&
               c.f_divergence_type != "alpha_divergence") {
             fail(r.place_of(key),
                  key,
                  "is alpha_divergence's, and f_divergence_type is " + c.f_divergence_type +
                      "; set f_divergence_type: alpha_divergence, or remove the key");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return format_double(c.f_alpha_divergence_coef); }},
      {"ld_alpha",
       section,
       R"md(number in [0, 1])md",
       R"md(none)md",
       "TRL",
       R"md(LD-DPO's weight of a completion's verbose part (DPOTrainer's `ld_alpha`): each log-likelihood of a pair, the model's and the reference's, counts the first `min(chosen, rejected)` predicted tokens of its completion in full and the rest times this, so a longer completion is not preferred for its length; `1` is DPO, `0` drops the tail. The metrics read the weighted log-likelihoods (as TRL's); the `sft` loss the plain ones. `rl: dpo` and `ipo`. Absent or null: no weighting.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         if (r.find(key) != nullptr) {
           c.ld_alpha = r.number(key, 1.0, between(0, 1), "use a weight in [0, 1], e.g. 0.5");
         }
         refuse_outside_dpo(r, c, key, c.ld_alpha.has_value());
       },
       [](const RunConfig& c) -> std::string { return c.ld_alpha ? format_double(*c.ld_alpha) : "null"; }},
      {"dpo_use_weighting",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(WPO's weighting (DPOTrainer's `use_weighting`): each pair's loss is multiplied by `w_chosen * w_rejected`, `w` the exponential of the completion's mean over its predicted tokens of `log p(token) - log sum_v p_v^2` under the trained model (no gradient), so pairs that are likely under the model as it stands count more. Refused with `aot` and `aot_unpaired` (they sort the pairs; TRL refuses them too). `rl: dpo` and `ipo`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.dpo_use_weighting = r.boolean(key, c.dpo_use_weighting);
         refuse_outside_dpo(r, c, key, c.dpo_use_weighting);
         r.guard({key, "dpo_loss_type"}, [&] {
           for (const auto& name : dpo_loss_names(c)) {
             if (c.dpo_use_weighting && (name == "aot" || name == "aot_unpaired")) {
               fail(r.place_of(key),
                    key,
                    "cannot weigh the " + name +
                        " loss, which sorts the pairs (TRL refuses it too); remove the key or that loss");
             }
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.dpo_use_weighting ? "true" : "false"; }},
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
      {"kto_loss_type",
       section,
       R"md(`kto` \| `apo_zero_unpaired`)md",
       R"md(`kto`)md",
       "TRL",
       R"md(`rl: kto`'s loss (KTOTrainer's `loss_type`): `kto`, KTO's loss with its KL estimate from mismatched prompts and completions; `apo_zero_unpaired`, the APO paper's unpaired loss (desirable rows `1 - sigmoid(beta * logratio)`, undesirable `sigmoid(beta * logratio)`), which has no KL term, runs no KL rows and takes `micro_batch_size: 1`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.kto_loss_type = r.choice(key, c.kto_loss_type, {"kto", "apo_zero_unpaired"});
         r.guard({key, "rl"}, [&] {
           if (c.kto_loss_type != "kto" && c.rl != "kto") {
             fail(r.place_of(key),
                  key,
                  "is rl: kto's loss, and rl is " + (c.rl.empty() ? std::string("not set") : c.rl) +
                      "; set rl: kto, or remove the key");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.kto_loss_type; }},
      {"precompute_ref_log_probs",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "TRL",
       R"md(`dpo`, `ipo` and `kto`: compute the reference's log-likelihoods of every pair (training and held-out; KTO's rows and their KL rows, which `apo_zero_unpaired` then does not read) in one pass before the first step, as TRL's DPOTrainer and KTOTrainer do, and read them in the steps instead of running the reference forward in each micro-batch (one forward fewer per micro-batch). A resumed run computes them again. Needs `rl: dpo`, `ipo` or `kto`. See PREFERENCE.md.)md",
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
