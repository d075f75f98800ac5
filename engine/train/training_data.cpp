// See training_data.h.
#include "engine/train/training_data.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/config/dataset_split.h"
#include "engine/data/dataset.h"
#include "engine/data/kto_rows.h"
#include "engine/data/model_tokenizer.h"
#include "engine/data/preference_rows.h"
#include "engine/data/preference_types.h"
#include "engine/data/prepared_cache.h"
#include "engine/data/special_tokens.h"
#include "engine/train/progress_line.h"
#include "engine/train/run_plan.h"

namespace qtrain::engine::train {

std::unique_ptr<data::TextTokenizer> run_tokenizer(const config::RunConfig& c,
                                                   int64_t vocab_size,
                                                   std::vector<data::NewToken>* added) {
  bool text = !c.special_tokens.empty() || !c.tokens.empty();  // pad_token pads pre-tokenized data too
  for (const auto& d : c.datasets) text = text || (!d.type.empty() && d.type != "pretokenized");
  if (!text) return nullptr;
  auto tokenizer = data::model_tokenizer(c.base_model, vocab_size);
  const auto file = c.base_model / "tokenizer.json";
  TORCH_CHECK(tokenizer || (c.special_tokens.empty() && c.tokens.empty()),
              c.special_tokens.empty() ? "tokens" : c.special_tokens.place + ": special_tokens",
              ": ",
              c.base_model.string(),
              " has no tokenizer.json to look the tokens up in or add them to; add the model's tokenizer files or "
              "remove the key");
  return data::with_run_tokens(std::move(tokenizer),
                               c.special_tokens,
                               c.tokens,
                               std::filesystem::exists(file) ? file.string() : "the built-in byte tokenizer",
                               added);
}

namespace {

// What shapes a dataset's samples besides the tokenizer and data files. See Note [Prepared
// dataset cache].
std::string sample_settings(const config::RunConfig& c, const config::DatasetConfig& d, bool has_tokenizer) {
  return nlohmann::json{{"type", d.type},
                        {"field", d.field},
                        {"field_messages", d.field_messages},
                        {"message_role", d.message_role},
                        {"message_content", d.message_content},
                        {"message_properties", d.message_properties},
                        {"field_tools", d.field_tools},
                        {"message_field_training", d.message_field_training},
                        {"message_field_training_detail", d.message_field_training_detail},
                        {"drop_system_message", d.drop_system_message},
                        {"roles", d.roles},
                        {"roles_to_train", d.roles_to_train},
                        {"train_on_eos", d.train_on_eos},
                        {"train_on_eot", d.train_on_eot},
                        {"chat_template_source", d.chat_template_source},
                        {"chat_template_fallback", d.chat_template_fallback},
                        {"eot_tokens", d.eot_tokens},
                        {"special_tokens",
                         {c.special_tokens.bos_token,
                          c.special_tokens.eos_token,
                          c.special_tokens.pad_token,
                          c.special_tokens.unk_token}},
                        {"tokens", c.tokens},
                        {"excess_length_strategy", d.excess_length_strategy},
                        {"split", d.split},
                        {"sequence_len", c.sequence_len},
                        {"train_on_inputs", c.train_on_inputs},
                        {"has_tokenizer", has_tokenizer}}
      .dump();
}

std::vector<data::Sample> load_one(const config::RunConfig& c,
                                   const config::DatasetConfig& d,
                                   const data::TextTokenizer* tokenizer,
                                   std::FILE* log,
                                   bool progress) {
  std::string key;
  if (!c.dataset_prepared_path.empty()) {
    key = data::prepared_key({c.base_model / "tokenizer.json",
                              c.base_model / "tokenizer_config.json",
                              c.base_model / "chat_template.jinja",
                              d.path},
                             sample_settings(c, d, tokenizer != nullptr));
    if (auto cached = data::read_prepared(c.dataset_prepared_path, key)) {
      std::fprintf(log,
                   "data: %s: %zu samples from %s\n",
                   d.path.c_str(),
                   cached->size(),
                   data::prepared_file(c.dataset_prepared_path, key).c_str());
      return std::move(*cached);
    }
  }
  data::DatasetStats stats;
  std::vector<data::Sample> samples;
  {
    std::optional<ProgressLine> line;
    if (progress) line.emplace("data: " + d.path.string(), "rows");
    data::RowMapOptions rows;
    rows.threads = c.dataset_processes;
    if (!d.split.empty()) rows.slice = config::parse_split(d.split).slice;
    if (line) rows.progress = [&](int64_t done, int64_t total) { line->update(done, total); };
    // Pre-tokenized ids are checked against the model's vocabulary here, grown by the tokens the
    // run adds (Note [New tokens]); a tokenizer's ids are within it already (model_tokenizer
    // checks the tokenizer's size).
    const bool pretokenized = d.type.empty() || d.type == "pretokenized";
    const int64_t vocab_size =
        pretokenized ? std::max(read_model_config(c.base_model).vocab_size, tokenizer ? tokenizer->vocab_size() : 0)
                     : std::numeric_limits<int64_t>::max();
    samples = data::load_dataset(d, tokenizer, c.sequence_len, c.train_on_inputs, &stats, rows, vocab_size);
  }
  std::fprintf(log,
               "data: %s: %lld rows, %lld longer than %lld tokens %s, %lld without trained tokens dropped\n",
               d.path.c_str(),
               static_cast<long long>(stats.rows),
               static_cast<long long>(stats.dropped_long + stats.truncated),
               static_cast<long long>(c.sequence_len),
               d.excess_length_strategy == "truncate" ? "truncated" : "dropped",
               static_cast<long long>(stats.dropped_untrained));
  if (!key.empty()) data::write_prepared(c.dataset_prepared_path, key, samples);
  return samples;
}

}  // namespace

std::vector<data::PreferencePair> load_preference_pairs(const config::RunConfig& c,
                                                        int64_t vocab_size,
                                                        const data::TextTokenizer* tokenizer,
                                                        std::FILE* log) {
  std::vector<data::PreferencePair> pairs;
  for (const auto& d : c.datasets) {
    TORCH_CHECK(d.type.empty() || d.type == "pretokenized" || data::is_preference_type(d.type),
                "dataset ",
                d.path.string(),
                ": rl reads pairs as TRL's DPOTrainer does (\"prompt\", \"chosen\", \"rejected\" as text or "
                "messages, or their tokenized \"prompt_ids\", \"chosen_ids\", \"rejected_ids\") or through one of "
                "axolotl's preference types (chatml.intel, llama3.default, chat_template.default, ...), and this "
                "entry has the supervised type ",
                d.type,
                "; remove the type or give a preference type");
    TORCH_CHECK(d.split.empty() || d.split == "train",
                "dataset ",
                d.path.string(),
                ": rl reads every pair of a file; its split ",
                d.split,
                " is not supported yet");
    // The chat template is parsed at the first row that needs it.
    std::optional<text::ChatTemplate> chat_template;
    const bool typed = data::is_preference_type(d.type);
    auto template_for = [&](bool needed) -> const text::ChatTemplate* {
      if (needed && !chat_template) {
        auto source = d.chat_template_source.empty() ? tokenizer->chat_template() : d.chat_template_source;
        if (!source && !d.chat_template_fallback.empty()) source = d.chat_template_fallback;
        if (source) chat_template.emplace(*source);
      }
      return chat_template ? &*chat_template : nullptr;
    };
    data::PreferenceRowTokenizer text;
    if (tokenizer != nullptr) {
      text = [&](const nlohmann::ordered_json& row, const std::string& where) {
        // An axolotl type writes TRL's text row first (Note [Preference types]); KTO's did already.
        const auto trl_row = typed && c.rl != "kto"
                                 ? data::preference_type_row(d,
                                                             row,
                                                             template_for(d.type.starts_with("chat_template.")),
                                                             tokenizer->bos_token(),
                                                             tokenizer->eos_token(),
                                                             where)
                                 : row;
        return data::tokenize_preference_row(
            trl_row, *tokenizer, template_for(data::is_conversational_row(trl_row)), where);
      };
    }
    TORCH_CHECK(!typed || tokenizer != nullptr,
                "dataset ",
                d.path.string(),
                ": type ",
                d.type,
                " writes text, which needs the model's tokenizer (tokenizer.json beside the base model)");
    // axolotl's KTO types write KTO's text rows (Note [Preference types]), which `text` then
    // tokenizes as TRL's.
    const auto kto_type = [&](const nlohmann::ordered_json& row, const std::string& where) {
      return data::kto_type_row(d, row, where);
    };
    auto read = c.rl == "kto" ? data::read_kto_jsonl(d.path, vocab_size, text, typed ? kto_type : data::KtoRowType())
                              : data::read_preference_jsonl(d.path, vocab_size, text, typed);
    const auto read_count = read.size();
    // TRL's keep_start truncation would leave no completion token of these.
    std::erase_if(
        read, [&](const data::PreferencePair& p) { return static_cast<int64_t>(p.prompt.size()) >= c.sequence_len; });
    std::fprintf(log,
                 "dataset %s: %zu %s, %zu whose prompt fills sequence_len %lld dropped\n",
                 d.path.c_str(),
                 read.size(),
                 c.rl == "kto" ? "KTO rows" : "preference pairs",
                 read_count - read.size(),
                 static_cast<long long>(c.sequence_len));
    pairs.insert(pairs.end(), std::make_move_iterator(read.begin()), std::make_move_iterator(read.end()));
  }
  TORCH_CHECK(!pairs.empty(),
              "rl: no preference pair is left: every prompt fills sequence_len ",
              c.sequence_len,
              "; raise sequence_len");
  return pairs;
}

std::vector<data::Sample> load_training_samples(const config::RunConfig& c,
                                                const data::TextTokenizer* tokenizer,
                                                std::FILE* log,
                                                bool progress) {
  TORCH_CHECK(!c.datasets.empty(), "the config lists no datasets; add e.g.\n  datasets:\n    - path: train.jsonl");
  std::vector<data::Sample> all;
  for (const auto& d : c.datasets) {
    auto s = load_one(c, d, tokenizer, log, progress);
    all.insert(all.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
  }
  return all;
}

namespace {

// Preference rows as TRL's tokenized rows, one JSON object per line, which read back as a dataset.
std::string preference_jsonl(const std::vector<data::PreferencePair>& pairs, bool kto) {
  std::string out;
  for (const auto& p : pairs) {
    const auto row =
        kto ? nlohmann::ordered_json{{"prompt_ids", p.prompt}, {"completion_ids", p.chosen}, {"label", p.desirable}}
            : nlohmann::ordered_json{{"prompt_ids", p.prompt}, {"chosen_ids", p.chosen}, {"rejected_ids", p.rejected}};
    out += row.dump() + "\n";
  }
  return out;
}

}  // namespace

int64_t write_preprocessed(const config::RunConfig& c, const std::filesystem::path& out) {
  const auto vocab_size = read_model_config(c.base_model).vocab_size;
  const auto tokenizer = run_tokenizer(c, vocab_size);
  std::string text;
  int64_t rows = 0;
  if (c.rl.empty()) {
    const auto samples = load_training_samples(c, tokenizer.get());
    text = data::pretokenized_jsonl(samples);
    rows = static_cast<int64_t>(samples.size());
  } else {
    const auto pairs = load_preference_pairs(c, vocab_size, tokenizer.get());
    text = preference_jsonl(pairs, c.rl == "kto");
    rows = static_cast<int64_t>(pairs.size());
  }
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  TORCH_CHECK(file.good(), out.string(), ": cannot write; check that its folder exists and is writable");
  file << text;
  file.close();
  TORCH_CHECK(file.good(), out.string(), ": writing failed (disk full?)");
  return rows;
}

}  // namespace qtrain::engine::train
