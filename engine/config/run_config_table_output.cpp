// The run config table's keys of output, logging and resume (Note [Run config table] in run_config_table.h).
#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "engine/config/config_entries.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_config_table.h"
#include "engine/config/run_limits.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

std::vector<RunConfigKey> output_keys() {
  const std::string section = "Output, logging, resume";
  return {
      {"output_dir",
       section,
       R"md(path)md",
       R"md(`./outputs` (beside the config))md",
       "axolotl",
       R"md(Where checkpoints, the adapter and logs go. Must not be empty.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.output_dir = r.path(key, c.output_dir);
         r.guard({key}, [&] {
           if (c.output_dir.empty()) {
             c.output_dir = "./outputs";
             r.find_written(key)->fail_value("empty; set a folder for checkpoints and the adapter, e.g. ./outputs");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.output_dir.string()); }},
      {"save_steps",
       section,
       R"md(int in [0, 10^9])md",
       R"md(`0`)md",
       "axolotl",
       R"md(Save a checkpoint every this many steps; `0`: only at the end.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.save_steps =
             r.integer(key, c.save_steps, between(0, kMaxSteps), "use 0 (save at the end only) or a step interval");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.save_steps); }},
      {"saves_per_epoch",
       section,
       R"md(int in [0, 10^6])md",
       R"md(`0` (unset))md",
       "axolotl",
       R"md(Instead of `save_steps`, as axolotl derives it: the fraction 1 / (`saves_per_epoch` * `num_epochs`) of the run's steps, rounded up (transformers' `ceil(total_steps * fraction)`; the total is `max_steps` when set, so the saves follow it rather than the epoch). A fraction of exactly 1 (`saves_per_epoch: 1`, `num_epochs: 1`) saves at each epoch's end. Not together with `save_steps`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.saves_per_epoch =
             r.integer(key, c.saves_per_epoch, between(0, kMaxPerEpoch), "use 0 (unset) or a count of saves");
         // axolotl refuses these pairs too (src/axolotl/utils/schemas/validation.py).
         r.guard({key, "save_steps"}, [&] {
           if (c.saves_per_epoch > 0 && c.save_steps > 0) {
             fail(r.place_of(key),
                  key,
                  "save_steps (" + r.place_of("save_steps") +
                      ") is set too; they are two ways to say one thing, keep one");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.saves_per_epoch); }},
      {"save_total_limit",
       section,
       R"md(int >= 0)md",
       R"md(`0`)md",
       "axolotl",
       R"md(Keep only the newest this many checkpoints; `0`: keep all.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.save_total_limit =
             r.integer(key, c.save_total_limit, at_least(0), "use 0 (keep all) or the checkpoints to keep");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.save_total_limit); }},
      {"logging_steps",
       section,
       R"md(int in [1, 10^9])md",
       R"md(`1`)md",
       "axolotl",
       R"md(Log every this many steps.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.logging_steps = r.integer(key, c.logging_steps, between(1, kMaxSteps), "use a step interval of 1 or more");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.logging_steps); }},
      {"loss_watchdog_threshold",
       section,
       R"md(number >= 0)md",
       R"md(`0` (off))md",
       "axolotl",
       R"md(Stop the run (the adapter is saved) once the logged loss has been above this for `loss_watchdog_patience` checks in a row. As axolotl's callback, each step's end checks the newest logged loss, which is the previous logged step's; a loss at or below the threshold resets the count, and an evaluation logged in between leaves nothing to check.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.loss_watchdog_threshold = r.number(key,
                                              c.loss_watchdog_threshold,
                                              at_least(0),
                                              "use 0 (off) or the loss above which the run stops, e.g. 5.0");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.loss_watchdog_threshold); }},
      {"loss_watchdog_patience",
       section,
       R"md(int >= 1)md",
       R"md(`3`)md",
       "axolotl",
       R"md(See `loss_watchdog_threshold`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.loss_watchdog_patience =
             r.integer(key,
                       c.loss_watchdog_patience,
                       at_least(1),
                       "use the logged steps in a row above the threshold that stop the run, e.g. 3");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.loss_watchdog_patience); }},
      {"eval_steps",
       section,
       R"md(int in [0, 10^9])md",
       R"md(`0`)md",
       "axolotl",
       R"md(Evaluate on the `val_set_size` rows every this many steps and at the last step; `0`: never. Requires `val_set_size` > 0.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.eval_steps = r.integer(key, c.eval_steps, between(0, kMaxSteps), "use 0 (never) or a step interval");
         r.guard({key, "val_set_size"}, [&] {
           if (c.eval_steps > 0 && c.val_set_size == 0) {
             fail(r.place_of(key),
                  key,
                  "evaluating every " + std::to_string(c.eval_steps) +
                      " steps needs held-out rows, but val_set_size is 0; set val_set_size (e.g. 0.05) or eval_steps: "
                      "0");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.eval_steps); }},
      {"evals_per_epoch",
       section,
       R"md(int in [0, 10^6])md",
       R"md(`0` (unset))md",
       "axolotl",
       R"md(Instead of `eval_steps`, as axolotl derives it: an evaluation every `ceil(total_steps / (evals_per_epoch * num_epochs))` steps (see `saves_per_epoch`), and at the last step. As in axolotl, it needs `val_set_size` > 0 (without it there is no evaluation), and a fraction of exactly 1 (`evals_per_epoch: 1`, `num_epochs: 1`) evaluates nowhere: axolotl leaves `eval_steps` unset then, and transformers' default is no evaluation. Not together with `eval_steps`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.evals_per_epoch =
             r.integer(key, c.evals_per_epoch, between(0, kMaxPerEpoch), "use 0 (unset) or a count of evaluations");
         r.guard({key, "eval_steps"}, [&] {
           if (c.evals_per_epoch > 0 && c.eval_steps > 0) {
             fail(r.place_of(key),
                  key,
                  "eval_steps (" + r.place_of("eval_steps") +
                      ") is set too; they are two ways to say one thing, keep one");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.evals_per_epoch); }},
      {"seed",
       section,
       R"md(int >= 0)md",
       R"md(`42`)md",
       "axolotl",
       R"md(The run's random seed.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.seed = r.integer(key, c.seed, at_least(0), "use a non-negative integer");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.seed); }},
      {"resume_from_checkpoint",
       section,
       R"md(path or bool)md",
       R"md(none)md",
       "axolotl",
       R"md(A checkpoint folder to continue from; `true`: the newest checkpoint in `output_dir` (an error when there is none, as in the HF Trainer); `false` or blank: start fresh.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             const std::optional<bool> latest = e->value.IsScalar() ? parse_bool(e->value.Scalar()) : std::nullopt;
             if (latest) {
               c.resume_from_latest_checkpoint = *latest;
             } else {
               c.resume_from_checkpoint = r.resolve(r.path_of(*e));
             }
           }
         });
       },
       [](const RunConfig& c) -> std::string {
         return c.resume_from_latest_checkpoint    ? "true"
                : c.resume_from_checkpoint.empty() ? "false"
                                                   : yaml_quoted(c.resume_from_checkpoint.string());
       }},
      {"auto_resume_from_checkpoints",
       section,
       R"md(bool)md",
       R"md(false)md",
       "axolotl",
       R"md(Continue from the newest checkpoint in `output_dir` when there is one, else start fresh.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.auto_resume_from_checkpoints = r.boolean(key, c.auto_resume_from_checkpoints);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.auto_resume_from_checkpoints); }},
      {"overwrite_output_dir",
       section,
       R"md(bool)md",
       R"md(false)md",
       "HF TrainingArguments",
       R"md(A run that does not continue the run in `output_dir` refuses to start when `output_dir` holds one (checkpoint-N folders, an adapter, metrics.jsonl, TensorBoard runs/), since the two runs' checkpoints would mix and `save_total_limit` would delete the new ones; `true` deletes those files first.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.overwrite_output_dir = r.boolean(key, c.overwrite_output_dir);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.overwrite_output_dir); }},
      {"use_tensorboard",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Also write TensorBoard event files.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.use_tensorboard = r.boolean(key, c.use_tensorboard); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.use_tensorboard); }},
      {"ddp_timeout",
       section,
       R"md(int in [1, 10^7])md",
       R"md(`1800`)md",
       "axolotl",
       R"md(In a multi-process run (docs/DISTRIBUTED.md): the seconds a rank waits for the others at the rendezvous and in each collective before it stops with an error: over Gloo one that names the rank that failed, over NCCL the NCCL watchdog's.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.ddp_timeout = r.integer(
             key, c.ddp_timeout, between(1, kMaxDdpTimeout), "use the seconds a rank waits for the others, e.g. 1800");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.ddp_timeout); }},
      {"ddp_backend",
       section,
       R"md(`auto`, `nccl`, `gloo`)md",
       R"md(`auto`)md",
       "transformers",
       R"md(In a multi-process run: the c10d backend of the collectives. `auto` takes NCCL on GPUs and Gloo on CPUs; `gloo` on GPUs stages collectives through host memory (docs/DISTRIBUTED.md).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.ddp_backend = r.choice(key, c.ddp_backend, {"auto", "nccl", "gloo"});
       },
       [](const RunConfig& c) -> std::string { return c.ddp_backend; }},
      {"shard_base",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "qtrain",
       R"md(In a multi-process run: each rank keeps 1/N of every layer's quantized base and all-gathers a layer before it computes (docs/DISTRIBUTED.md, "Sharded base"); every layer is then recomputed in backward. Bit for bit the same training as without it.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.shard_base = r.boolean(key, c.shard_base); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.shard_base); }},
  };
}

}  // namespace qtrain::engine::config
