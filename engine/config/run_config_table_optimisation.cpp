// The run config table's keys of optimisation (Note [Run config table] in run_config_table.h).
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

std::vector<RunConfigKey> optimisation_keys() {
  const std::string section = "Optimisation";
  return {
      {"micro_batch_size",
       section,
       R"md(int in [1, 65536])md",
       R"md(`1`)md",
       "axolotl",
       R"md(Samples per forward pass; `micro_batch_size` * `sequence_len` at most 2^31 tokens.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.micro_batch_size = r.integer(
             key, c.micro_batch_size, between(1, kMaxMicroBatchSize), "use the samples per forward pass, 1 or more");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.micro_batch_size); }},
      {"gradient_accumulation_steps",
       section,
       R"md(int in [1, 2^20])md",
       R"md(`1`)md",
       "axolotl",
       R"md(Micro-batches per optimizer step; `micro_batch_size` * `gradient_accumulation_steps` * `sequence_len` at most 2^34 tokens.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.gradient_accumulation_steps = r.integer(key,
                                                   c.gradient_accumulation_steps,
                                                   between(1, kMaxGradientAccumulationSteps),
                                                   "use the micro-batches per optimizer step, 1 or more");
         // Each factor is bounded above, so the products fit in 64 bits. See run_limits.h.
         r.guard({"micro_batch_size", "sequence_len", key}, [&] {
           const int64_t forward = c.micro_batch_size * c.sequence_len;
           const std::string sizes = "micro_batch_size " + std::to_string(c.micro_batch_size) + " * sequence_len " +
                                     std::to_string(c.sequence_len);
           if (forward > kMaxTokensPerMicroBatch) {
             fail(r.place_of("micro_batch_size"),
                  "micro_batch_size",
                  sizes + " = " + std::to_string(forward) +
                      " tokens in one forward pass, more than 2^31 that qtrain accepts; lower micro_batch_size or "
                      "sequence_len and raise gradient_accumulation_steps");
           }
           const int64_t step = forward * c.gradient_accumulation_steps;
           if (step > kMaxTokensPerStep) {
             fail(r.place_of(key),
                  key,
                  sizes + " * gradient_accumulation_steps " + std::to_string(c.gradient_accumulation_steps) + " = " +
                      std::to_string(step) +
                      " tokens per optimizer step, more than 2^34 that qtrain accepts; lower "
                      "gradient_accumulation_steps");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.gradient_accumulation_steps); }},
      {"num_epochs",
       section,
       R"md(int in [1, 10^6])md",
       R"md(`1`)md",
       "axolotl",
       R"md(Passes over the data (a whole number, unlike axolotl's).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.num_epochs = r.integer(key, c.num_epochs, between(1, kMaxEpochs), "use 1 or more passes over the data");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.num_epochs); }},
      {"max_steps",
       section,
       R"md(int, -1 or in [1, 10^9])md",
       R"md(`-1`)md",
       "axolotl",
       R"md(Optimizer steps of the run; `-1`: as many as `num_epochs` take. Wins over `num_epochs`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.max_steps =
             r.integer(key, c.max_steps, between(-1, kMaxSteps), "use -1 (run num_epochs) or a step count >= 1");
         r.guard({key}, [&] {
           if (c.max_steps == 0) {
             c.max_steps = -1;
             r.find(key)->fail_value("0 is neither -1 (run num_epochs) nor a step count; use -1 or a count >= 1");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.max_steps); }},
      {"learning_rate",
       section,
       R"md(number in (0, 10])md",
       R"md(`2e-4`)md",
       "axolotl",
       R"md(Peak learning rate.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.learning_rate =
             r.number(key,
                      c.learning_rate,
                      between(0, kMaxLearningRate, /*lo_open=*/true),
                      "use a positive rate, e.g. 2e-4 for LoRA (a rate above 10 diverges at the first step)");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.learning_rate); }},
      {"lr_scheduler",
       section,
       R"md(`constant` \| `linear` \| `cosine`)md",
       R"md(`cosine`)md",
       "axolotl",
       R"md(Shape after the warmup; `linear` and `cosine` decay to 0 at the end of the run.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.lr_scheduler = r.choice(key, c.lr_scheduler, {"constant", "linear", "cosine"});
       },
       [](const RunConfig& c) -> std::string { return c.lr_scheduler; }},
      {"warmup_steps",
       section,
       R"md(int in [0, 10^9])md",
       R"md(`0`)md",
       "axolotl",
       R"md(Linear warmup from 0 over this many steps. More than `max_steps` (a short trial run with `--set max_steps=N`) runs as in transformers and axolotl, the learning rate rising for the whole run, and every command that reads the config warns about it.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.warmup_steps = r.integer(key, c.warmup_steps, between(0, kMaxSteps), "use 0 (no warmup) or a step count");
         r.guard({key, "max_steps"}, [&] {
           // A short trial run (--set max_steps=8) of a config with warmup: transformers and axolotl run
           // it with the learning rate still rising at the end, and so does qtrain, saying so.
           if (c.max_steps > 0 && c.warmup_steps > c.max_steps) {
             c.warnings.push_back(r.place_of(key) + ": warmup_steps " + std::to_string(c.warmup_steps) +
                                  " is more than max_steps (" + std::to_string(c.max_steps) + ", at " +
                                  r.place_of("max_steps") + "): the learning rate rises for the whole run, to " +
                                  std::to_string(c.max_steps) + "/" + std::to_string(c.warmup_steps) +
                                  " of learning_rate, as transformers and axolotl run it");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.warmup_steps); }},
      {"warmup_ratio",
       section,
       R"md(number in [0, 1))md",
       R"md(`0.0`)md",
       "axolotl",
       R"md(Warmup over this fraction of the run's steps. Not together with `warmup_steps` > 0.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.warmup_ratio = r.number(
             key, c.warmup_ratio, unit_interval_open(), "use a fraction of the run such as 0.03, or 0 for none");
         r.guard({key, "warmup_steps"}, [&] {
           if (c.warmup_steps > 0 && c.warmup_ratio > 0) {
             fail(r.place_of(key),
                  key,
                  "warmup_steps (" + std::to_string(c.warmup_steps) + ", at " + r.place_of("warmup_steps") +
                      ") and warmup_ratio are both set; keep one");
           }
         });
       },
       [](const RunConfig& c) -> std::string { return format_double(c.warmup_ratio); }},
      {"optimizer",
       section,
       R"md(`adamw_torch`, `adamw_bnb_8bit`)md",
       R"md(`adamw_torch`)md",
       "axolotl",
       R"md(`adamw_torch`: torch's AdamW with decoupled weight decay and float32 moments; also read from `adamw`, `adamw_torch_fused` and `paged_adamw_32bit`. `adamw_bnb_8bit`: bitsandbytes' AdamW8bit, moments in 8 bits per element with a scale per block of 256 (tensors under 4096 elements keep float32 moments), equal to bitsandbytes' CPU backend bit for bit; also read from `adamw_8bit`, `paged_adamw_8bit` and torchao's `adamw_torch_8bit` and `adamw_torch_4bit`. `adamw_torch_fused` and the `paged_` names are named in the accepted-and-ignored line (the same optimizer, its state held differently in memory); so are torchao's two, which qtrain does not implement: such a run trains with `adamw_bnb_8bit` (never with 32-bit state: a low-bit name asks for less memory), whose rounding differs from torchao's, and for `adamw_torch_4bit` whose state takes twice the bytes. Other optimizers are refused. See [OPTIMIZERS.md](OPTIMIZERS.md).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.optimizer = r.choice(key,
                                c.optimizer,
                                {"adamw_torch", "adamw_bnb_8bit"},
                                "qtrain implements AdamW: use adamw_torch (also read from adamw, adamw_torch_fused and "
                                "paged_adamw_32bit) or bitsandbytes' 8-bit AdamW adamw_bnb_8bit (also read from "
                                "adamw_8bit, paged_adamw_8bit, adamw_torch_8bit and adamw_torch_4bit)",
                                {{"adamw", "adamw_torch"},
                                 {"adamw_torch_fused", "adamw_torch"},
                                 {"paged_adamw_32bit", "adamw_torch"},
                                 {"adamw_8bit", "adamw_bnb_8bit"},
                                 {"paged_adamw_8bit", "adamw_bnb_8bit"},
                                 {"adamw_torch_8bit", "adamw_bnb_8bit"},
                                 {"adamw_torch_4bit", "adamw_bnb_8bit"}});
         // The same optimizer with another way to hold its state in memory: see Note [Performance hints].
         if (const Entry* e = r.find(key); e && e->value.IsScalar()) {
           const std::string& name = e->value.Scalar();
           if (name == "adamw_torch_fused") {
             c.ignored_keys.push_back("optimizer: adamw_torch_fused (the same AdamW; fusing is a kernel choice)");
           } else if (name == "paged_adamw_32bit" || name == "paged_adamw_8bit") {
             c.ignored_keys.push_back(
                 "optimizer: " + name + " (the same " +
                 (name == "paged_adamw_8bit" ? "8-bit AdamW, adamw_bnb_8bit" : "AdamW") +
                 "; paging moves its state to host memory under pressure, and LoRA's state is small)");
           } else if (name == "adamw_torch_8bit" || name == "adamw_torch_4bit") {
             // torchao's low-bit AdamW. Not a performance hint: the updates differ in their rounding.
             // Never 32-bit state for a low-bit name: the user chose it to save memory. Named so that the
             // run says what it trains with.
             c.ignored_keys.push_back(
                 "optimizer: " + name + " (torchao's " + (name == "adamw_torch_8bit" ? "8" : "4") +
                 "-bit AdamW is not implemented; qtrain runs bitsandbytes' 8-bit AdamW, adamw_bnb_8bit, whose state is "
                 "quantized in blocks of 256 as bitsandbytes does it" +
                 (name == "adamw_torch_4bit" ? ", at twice the bytes of torchao's 4-bit state" : std::string()) + ")");
           }
         }
       },
       [](const RunConfig& c) -> std::string { return c.optimizer; }},
      {"adam_beta1",
       section,
       R"md(number in [0, 1))md",
       R"md(`0.9`)md",
       "axolotl",
       R"md(AdamW's decay of the first moment (the running mean of the gradient).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.adam_beta1 = r.number(key, c.adam_beta1, unit_interval_open(), "use a value in [0, 1), e.g. 0.9");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.adam_beta1); }},
      {"adam_beta2",
       section,
       R"md(number in [0, 1))md",
       R"md(`0.999`)md",
       "axolotl",
       R"md(AdamW's decay of the second moment (the running mean of the squared gradient).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.adam_beta2 = r.number(key, c.adam_beta2, unit_interval_open(), "use a value in [0, 1), e.g. 0.999");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.adam_beta2); }},
      {"adam_epsilon",
       section,
       R"md(number > 0)md",
       R"md(`1e-8`)md",
       "axolotl",
       R"md(AdamW's epsilon, added to the second moment's square root before the division.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.adam_epsilon = r.number(key, c.adam_epsilon, above(0), "use a small positive number, e.g. 1e-8");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.adam_epsilon); }},
      {"weight_decay",
       section,
       R"md(number >= 0)md",
       R"md(`0.0`)md",
       "axolotl",
       R"md(AdamW's decoupled weight decay, applied to every trained tensor (LoRA's, DoRA's magnitudes, the embeddings and head trained in full) but the norms trained in full, as the HF Trainer applies it (its `get_decay_parameter_names` leaves norms out).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.weight_decay = r.number(key, c.weight_decay, at_least(0), "use 0 (none) or a positive decay, e.g. 0.01");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.weight_decay); }},
      {"max_grad_norm",
       section,
       R"md(number >= 0)md",
       R"md(`1.0`)md",
       "axolotl",
       R"md(Clip the gradients' global L2 norm to this; `0`: no clipping.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.max_grad_norm =
             r.number(key, c.max_grad_norm, at_least(0), "use 0 (no clipping) or a positive norm, e.g. 1.0");
       },
       [](const RunConfig& c) -> std::string { return format_double(c.max_grad_norm); }},
      {"loraplus_lr_ratio",
       section,
       R"md(number > 0)md",
       R"md(none)md",
       "axolotl",
       R"md(LoRA+: every `lora_B` (linears, routers, experts) trains at this many times the learning rate of the rest, under the same schedule, as peft's `create_loraplus_optimizer` groups the parameters (the LoRA+ paper suggests 16; lower `learning_rate` a little with it). The modules of `lora_modules_to_save` keep `learning_rate`, as in peft. `weight_decay` applies to every group as written (peft's helper, as axolotl calls it, sets the decay of all its groups to 0 unless given `loraplus_weight_decay`). Absent or null: one rate for all.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         if (r.find(key) != nullptr) {
           c.loraplus_lr_ratio =
               r.number(key, 1.0, above(0), "use lora_B's learning rate over lora_A's, e.g. 16 (the LoRA+ paper's)");
         }
       },
       [](const RunConfig& c) -> std::string {
         return c.loraplus_lr_ratio ? format_double(*c.loraplus_lr_ratio) : "null";
       }},
      {"loraplus_lr_embedding",
       section,
       R"md(number >= 0)md",
       R"md(none)md",
       "axolotl",
       R"md(LoRA+'s rate for LoRA on embedding layers; qtrain puts no LoRA on embeddings, so it is read and has no effect (the run log says so).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         if (r.find(key) != nullptr) {
           c.loraplus_lr_embedding =
               r.number(key, 1e-6, at_least(0), "use a learning rate, e.g. 1e-6 (peft's default)");
         }
       },
       [](const RunConfig& c) -> std::string {
         return c.loraplus_lr_embedding ? format_double(*c.loraplus_lr_embedding) : "null";
       }},
  };
}

}  // namespace qtrain::engine::config
