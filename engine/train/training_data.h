// The training samples of a run: every dataset of the config through the model's tokenizer
// (engine/data/model_tokenizer.h), in config order, before the split, shuffling and packing.
// The trainer and `qtrain preprocess` read data through here, so both see the same samples.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/data/preference_pairs.h"
#include "engine/data/pretokenized.h"
#include "engine/data/special_tokens.h"
#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::train {

// The tokenizer of base_model (data::model_tokenizer) with the config's special_tokens and tokens
// (See Note [Special tokens] and Note [New tokens]; the tokens it added go to `added`) when a
// dataset is text (completion, alpaca, chat_template) or either key is set; else null, so that
// pre-tokenized runs never read tokenizer files.
std::unique_ptr<data::TextTokenizer> run_tokenizer(const config::RunConfig& c,
                                                   int64_t vocab_size,
                                                   std::vector<data::NewToken>* added = nullptr);

// Prints one line per dataset (rows, truncated, dropped) to `log`, and, when `progress` (rank 0 of
// a multi-process run), a progress line to stderr while a dataset takes more than a second
// (progress_line.h). Rows are tokenized on
// dataset_processes threads. With dataset_prepared_path, a dataset whose entry is cached is read
// from there, and one that is not is stored there.
std::vector<data::Sample> load_training_samples(const config::RunConfig& c,
                                                const data::TextTokenizer* tokenizer,
                                                std::FILE* log = stdout,
                                                bool progress = true);

// Preference tuning's pairs (rl): every dataset of the config, in order, as pre-tokenized pairs or
// as rows of text or conversations tokenized by `tokenizer` (null: such rows are refused) and the
// dataset's chat template, as TRL's DPOTrainer does (data::read_preference_jsonl,
// data/preference_rows.h); for rl: kto, KTO's rows without their KL completions yet
// (data::read_kto_jsonl, Note [KTO rows]). A pair whose prompt alone fills sequence_len is
// dropped, as TRL drops it (nothing of its completions would be left). One line per dataset to
// `log`.
std::vector<data::PreferencePair> load_preference_pairs(const config::RunConfig& c,
                                                        int64_t vocab_size,
                                                        const data::TextTokenizer* tokenizer,
                                                        std::FILE* log = stdout);

// `qtrain preprocess`: the samples as JSONL, one {"input_ids": [...], "labels": [...]} per line,
// written to `out` (replaced); with rl, the pairs as TRL's tokenized rows ({"prompt_ids",
// "chosen_ids", "rejected_ids"}; KTO's {"prompt_ids", "completion_ids", "label"}, before their KL
// completions), which read back as a dataset. Reads base_model's config.json and tokenizer files,
// not its weights. Returns the number of rows written.
int64_t write_preprocessed(const config::RunConfig& c, const std::filesystem::path& out);

}  // namespace qtrain::engine::train
