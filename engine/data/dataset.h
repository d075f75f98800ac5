// Turns one `datasets:` entry of a run config into training samples: reads the JSONL file, renders
// text rows with the format's prompt template, tokenizes them and builds the loss mask, the way
// axolotl does for the same `type`, so that an axolotl dataset trains the same tokens here.
//
//   type "" / "pretokenized": rows with "input_ids" (and optional "labels"); see pretokenized.h.
//   type "completion": row[field] (default "text") -> [BOS] text [EOS], every token trained.
//   type "alpaca": {"instruction", "input" (optional), "output"} -> [BOS] prompt output [EOS] with
//     axolotl's alpaca prompt (see dataset.cpp); the prompt is not trained unless train_on_inputs.
//   type "input_output": {"segments": [{"label": bool, "text": ...}, ...]} -> the segments'
//     tokens (no special tokens added), trained where label is true (or train_on_inputs).
//   type "chat_template": conversations rendered with the chat template; see chat_dataset.h.
// [BOS] is what the tokenizer's add_special_tokens adds (none for Qwen; see text_tokenizer.h).
//
// Note [Long and untrained samples]
// As axolotl (utils/data/utils.py handle_long_seq_in_dataset, then utils/trainer.py
// drop_no_trainable_tokens): a sample longer than sequence_len is dropped (excess_length_strategy
// drop, the default), cut to sequence_len (truncate) or an error (raise); then a sample left with
// nothing to predict (an alpaca prompt that fills the window, a row whose labels are all -100) is
// dropped. qtrain keeps one sample per row and never splits a long text into chunks. Both drops
// are counted in DatasetStats.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/data/pretokenized.h"
#include "engine/data/row_map.h"
#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

// What loading did to the rows, for the caller to report.
struct DatasetStats {
  int64_t rows = 0;               // rows read from the file
  int64_t dropped_long = 0;       // samples longer than sequence_len, dropped
  int64_t truncated = 0;          // samples longer than sequence_len, cut to it
  int64_t dropped_untrained = 0;  // samples dropped because no token of them is predicted
};

// `tokenizer` is null when the model has none (text types are then an error). Every error names
// the file and line, the field, the value and the fix. Pre-tokenized ids must lie in
// [0, vocab_size) (the model's; the default only refuses negative ones). Rows convert on `rows.threads` threads with
// the same result as on one (See Note [Parallel rows] in row_map.cpp).
std::vector<Sample> load_dataset(const config::DatasetConfig& d,
                                 const TextTokenizer* tokenizer,
                                 int64_t sequence_len,
                                 bool train_on_inputs,
                                 DatasetStats* stats = nullptr,
                                 const RowMapOptions& rows = {},
                                 int64_t vocab_size = std::numeric_limits<int64_t>::max());

// axolotl's alpaca prompt (prompters.AlpacaPrompter, style "instruct") up to and including
// "### Response:\n"; `input` empty selects the variant without an input section.
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

}  // namespace qtrain::engine::data
