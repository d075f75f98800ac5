// The run config table's keys of data (Note [Run config table] in run_config_table.h).
#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "engine/config/chat_template_choice.h"
#include "engine/config/config_entries.h"
#include "engine/config/config_reader.h"
#include "engine/config/run_config_table.h"
#include "engine/config/run_limits.h"
#include "engine/config/yaml_scalar.h"

namespace qtrain::engine::config {

namespace fs = std::filesystem;

namespace {

// One token of special_tokens; "" (as to_yaml writes an unset one) leaves the tokenizer's.
std::string text_of_token(const Entry& e, const std::string& example) {
  if (!e.value.IsScalar()) {
    e.fail_value("expected a token, got " + shown(e.value) + "; write e.g. " + example);
  }
  return e.value.Scalar();
}

}  // namespace

std::vector<RunConfigKey> data_keys() {
  const std::string section = "Data";
  return {
      {"datasets",
       section,
       R"md(list of maps)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(The training data; entries below.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.datasets = r.datasets(key); },
       [](const RunConfig& c) { return datasets_yaml(c.datasets); }},
      {"sequence_len",
       section,
       R"md(int in [1, 2^24])md",
       R"md(`2048`)md",
       "axolotl",
       R"md(Maximum tokens per sample (per packed sequence with `sample_packing`).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.sequence_len =
             r.integer(key, c.sequence_len, between(1, kMaxSequenceLen), "use the tokens per sample, e.g. 2048");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.sequence_len); }},
      {"sample_packing",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Pack several samples into one sequence of `sequence_len`; attention does not cross samples.)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.sample_packing = r.boolean(key, c.sample_packing); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.sample_packing); }},
      {"train_on_inputs",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Also compute the loss on the prompt part of a sample (for alpaca rows: the instruction and input).)md",
       [](Reader& r, RunConfig& c, const std::string& key) { c.train_on_inputs = r.boolean(key, c.train_on_inputs); },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.train_on_inputs); }},
      {"chat_template_jinja",
       section,
       R"md(string)md",
       R"md(none)md",
       "axolotl",
       R"md(The Jinja text of the template (it contains `{{` or `{%`), or the path of a `.jinja` file. Setting it alone implies `chat_template: jinja`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.chat_template_jinja = r.text(key, "chat_template_jinja: ./chatml.jinja");
       },
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.chat_template_jinja); }},
      {"chat_template",
       section,
       R"md(`tokenizer_default` \| `jinja` \| a template name \| `tokenizer_default_fallback_<name>`)md",
       R"md(`tokenizer_default`)md",
       "axolotl",
       R"md(The template of `type: chat_template` datasets: the one in base_model's `tokenizer_config.json`; `jinja`: the one in `chat_template_jinja`; one of axolotl's names `chatml`, `llama3`, `mistral_v1`, `mistral_v2v3`, `mistral_v3_tekken`, `mistral_v7_tekken`, `qwen_25`, `qwen3`, `gemma`, `gemma3`, `gemma4`: qtrain's template of that name, which renders what axolotl's does ([docs/DATA.md](DATA.md#named-chat-templates)); `tokenizer_default_fallback_<name>`: the tokenizer's template, else the named one. A dataset entry's own `chat_template` / `chat_template_jinja` replace these for that dataset.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.chat_template = r.choice(key,
                                    c.chat_template_jinja.empty() ? c.chat_template : "jinja",
                                    chat_template_choices(),
                                    chat_template_choice_help(),
                                    {});
         r.guard({key}, [&] {
           DatasetConfig top;  // what the top-level keys mean, checked even when no dataset uses them
           apply_chat_template(
               c.chat_template,
               c.chat_template_jinja,
               [&](const fs::path& p) { return r.resolve(p); },
               r.place_of(key),
               r.place_of("chat_template_jinja"),
               top);
           for (DatasetConfig& d : c.datasets) {
             if (!d.chat_template.empty()) continue;  // the dataset's own; see Reader::read_chat_keys
             d.chat_template_source = top.chat_template_source;
             d.chat_template_fallback = top.chat_template_fallback;
           }
         });
       },
       [](const RunConfig& c) -> std::string { return c.chat_template; }},
      {"eot_tokens",
       section,
       R"md(list of strings)md",
       R"md(`[eos_token]`)md",
       "axolotl",
       R"md(The tokens that end a turn (`<\|im_end\|>`, `<\|eot_id\|>`, `<end_of_turn>`); the first one after a trained turn is trained per `train_on_eot`. A name the tokenizer does not know is an error.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.eot_tokens = r.strings(key, "eot_tokens: [\"<|im_end|>\"]");
         for (DatasetConfig& d : c.datasets) d.eot_tokens = c.eot_tokens;
       },
       [](const RunConfig& c) { return yaml_list(c.eot_tokens); }},
      {"special_tokens",
       section,
       R"md(map)md",
       R"md(none)md",
       "axolotl",
       R"md(`bos_token`, `eos_token`, `pad_token`, `unk_token`: a token the tokenizer already has takes over that role, as axolotl's `add_special_tokens` does (Llama 3's examples set `pad_token: <\|end_of_text\|>`). `eos_token` becomes the EOS that `completion` and `alpaca` append, that `train_on_eos` trains, that chat templates read as `eos_token`, and the default of `eot_tokens`; `pad_token` is the padding id; `bos_token` is what templates read as `bos_token` (the BOS the tokenizer adds comes from tokenizer.json); `unk_token` changes nothing qtrain's tokenizer does. A token the tokenizer does not have is added as a special token, as `tokens` adds its entries (before them, in the order bos, eos, pad, unk); a new one other than `pad_token` needs the embeddings trained. The built-in byte tokenizer cannot add tokens: a token it lacks is an error naming the place, the token and the fix. `additional_special_tokens` is refused (it changes how text containing those tokens is split).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           const Entry* e = r.find(key);
           if (!e) return;
           const std::string example = "special_tokens: {pad_token: \"<|end_of_text|>\"}";
           if (!e->value.IsMap()) e->fail_value("expected a map, got " + shown(e->value) + "; write e.g. " + example);
           c.special_tokens.place = e->key_place();
           for (const Entry& role : map_entries(e->value, e->origin, "special_tokens.")) {
             const std::string name = role.key.substr(std::string("special_tokens.").size());
             std::string* slot = name == "bos_token"   ? &c.special_tokens.bos_token
                                 : name == "eos_token" ? &c.special_tokens.eos_token
                                 : name == "pad_token" ? &c.special_tokens.pad_token
                                 : name == "unk_token" ? &c.special_tokens.unk_token
                                                       : nullptr;
             if (!slot) {
               fail(role.key_place(),
                    role.key,
                    name == "additional_special_tokens"
                        ? "marking more tokens special changes how text containing them is split, which qtrain does "
                          "not do; "
                          "remove the key"
                        : "qtrain reads bos_token, eos_token, pad_token and unk_token here; remove the key");
             }
             if (role.value.IsNull()) continue;
             *slot = text_of_token(role, example);
           }
         });
       },
       [](const RunConfig& c) {
         const auto& t = c.special_tokens;
         return "{bos_token: " + yaml_quoted(t.bos_token) + ", eos_token: " + yaml_quoted(t.eos_token) +
                ", pad_token: " + yaml_quoted(t.pad_token) + ", unk_token: " + yaml_quoted(t.unk_token) + "}";
       }},
      {"tokens",
       section,
       R"md(list of strings)md",
       R"md(`[]`)md",
       "axolotl",
       R"md(Tokens added to the tokenizer as axolotl adds them (`add_tokens` with `normalized: false`): a token it lacks gets the next id and is cut out of the text before the model sees it (so is one of the model's own vocabulary, as in transformers); one it has already keeps its id. The embeddings (and an untied head) then grow to the tokenizer's size where they have fewer rows (a model with spare rows, such as Qwen's, uses those), as transformers' `resize_token_embeddings`; the `vocabulary:` line of the run log names the tokens, their ids and the rows. A new token's rows start random, so the run is refused unless `lora_modules_to_save` holds `embed_tokens` and `lm_head` (or `unfrozen_parameters` unfreezes both), as axolotl requires for new special tokens; a new `pad_token` alone needs nothing. `qtrain eval` and `qtrain merge` with the same config size the model the same way, so the adapter fits; merge writes the grown `vocab_size`. The tokenizer with the new tokens is written beside the adapter in `output_dir` (as axolotl saves it) and into `qtrain merge`'s folder, so transformers and qtrain load their ids from there. [docs/MODELS.md](MODELS.md#new-tokens))md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.tokens = r.strings(key, "tokens: [\"<|im_start|>\", \"<|im_end|>\"]");
       },
       [](const RunConfig& c) { return yaml_list(c.tokens); }},
      {"resize_token_embeddings_to_32x",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Grown embeddings get a multiple of 32 rows.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.resize_token_embeddings_to_32x = r.boolean(key, c.resize_token_embeddings_to_32x);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.resize_token_embeddings_to_32x); }},
      {"mean_resizing_embeddings",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(New rows drawn from the old rows' mean and covariance (transformers' `mean_resizing`, its own default) instead of axolotl's default normal(0, `initializer_range`). Either way the rows are bitwise those of `torch.manual_seed(seed); model.resize_token_embeddings(rows, mean_resizing=...)` on the CPU.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.mean_resizing_embeddings = r.boolean(key, c.mean_resizing_embeddings);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.mean_resizing_embeddings); }},
      {"shrink_embeddings",
       section,
       R"md(bool)md",
       R"md(`false`)md",
       "axolotl",
       R"md(Embeddings with more rows than the tokenizer has tokens are cut to that many (axolotl keeps them by default).)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.shrink_embeddings = r.boolean(key, c.shrink_embeddings);
       },
       [](const RunConfig& c) -> std::string { return yaml_bool(c.shrink_embeddings); }},
      {"excess_length_strategy",
       section,
       R"md(`drop` \| `truncate` \| `raise`)md",
       R"md(`drop`)md",
       "axolotl",
       R"md(A sample longer than `sequence_len`: dropped (counted on the `data:` line), cut to `sequence_len` tokens, or an error naming the file and row. [docs/DATA.md](DATA.md#long-samples-and-samples-without-a-trained-token))md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.excess_length_strategy = r.choice(key,
                                             c.excess_length_strategy,
                                             {"drop", "truncate", "raise"},
                                             "use drop (axolotl's default), truncate or raise",
                                             {});
         for (DatasetConfig& d : c.datasets) d.excess_length_strategy = c.excess_length_strategy;
       },
       [](const RunConfig& c) -> std::string { return c.excess_length_strategy; }},
      {"dataset_prepared_path",
       section,
       R"md(path)md",
       R"md(none)md",
       "axolotl",
       R"md(A folder that caches the tokenized datasets: a run whose tokenizer files, data file and sample-shaping keys (dataset keys, chat template, `eot_tokens`, `special_tokens`, `tokens`, `excess_length_strategy`, `sequence_len`, `train_on_inputs`) are unchanged reads its samples from there instead of tokenizing; any change makes a new entry, so a stale one is never read. Entries are `<key>.jsonl` files of `input_ids`/`labels`.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.dataset_prepared_path = r.path(key, c.dataset_prepared_path);
       },
       [](const RunConfig& c) -> std::string { return yaml_quoted(c.dataset_prepared_path.string()); }},
      {"dataset_processes",
       section,
       R"md(int in [0, 4096])md",
       R"md(`0` (every core))md",
       "axolotl",
       R"md(Threads that tokenize dataset rows (axolotl's processes; its newer name `dataset_num_proc` is refused with a message to rename it). `0`: one per core, as axolotl's default `os.cpu_count()`. The samples are the same with any number, so it is not part of the `dataset_prepared_path` key.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         c.dataset_processes = r.integer(key,
                                         c.dataset_processes,
                                         between(0, kMaxDatasetProcesses),
                                         "use the threads that tokenize rows, or 0 for every core");
       },
       [](const RunConfig& c) -> std::string { return std::to_string(c.dataset_processes); }},
      {"val_set_size",
       section,
       R"md(number)md",
       R"md(`0`)md",
       "axolotl",
       R"md(Rows held out for evaluation: below 1, a fraction in [0, 1); from 1 on, a whole number of rows (`500`). `0`: none.)md",
       [](Reader& r, RunConfig& c, const std::string& key) {
         r.guard({key}, [&] {
           if (const Entry* e = r.find(key)) {
             const std::string fix = "use a fraction such as 0.05, a whole number of rows such as 500, or 0 for none";
             const double v = r.number_of(*e, at_least(0), fix);
             if (v >= 1 && std::floor(v) != v) {
               e->fail_value(e->value.Scalar() + " is neither a fraction in [0, 1) nor a whole number of rows >= 1; " +
                             fix);
             }
             c.val_set_size = v;
           }
         });
       },
       [](const RunConfig& c) -> std::string {
         return c.val_set_size >= 1 ? std::to_string(static_cast<int64_t>(c.val_set_size))
                                    : format_double(c.val_set_size);
       }},
  };
}

}  // namespace qtrain::engine::config
