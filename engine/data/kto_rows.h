// KTO's unpaired rows, read and given their KL completions as TRL 1.16's KTOTrainer prepares
// them. See Note [KTO rows].
//
// Note [KTO rows]
// KTO trains on rows of a prompt with one completion and a boolean label (desirable or not). A row
// travels as a PreferencePair whose `chosen` is its completion, `rejected` its KL completion and
// `desirable` its label, so that the pair machinery carries it unchanged: collate_pairs makes the
// B completion rows of a micro-batch and then its B KL rows (Note [Preference batch]), and a
// precomputed reference holds the two rows' log-likelihoods. As KTOTrainer._prepare_dataset:
// - A file of pairs ("chosen" and "rejected", or their ids) is unpaired, in blocks of 1000 rows
//   (datasets' map batch): the block's chosen completions labelled desirable, then its rejected
//   ones labelled undesirable, each with the pair's prompt (extracted as TRL's extract_prompt
//   where the pair has none) and then tokenized on its own, so a token that merges across the
//   prompt's end moves only its own row's split, not the other's as DPO's shared split would.
// - Text and conversations are tokenized as TRL's trainers tokenize a prompt and a completion
//   (Note [Preference rows]: the EOS text appended to plain text, the completion starting where
//   the tokenized prompt and prompt + completion differ); a row whose prompt fills sequence_len is
//   dropped before the KL completions are given.
// - The KL completions: within each run of micro_batch_size consecutive rows (the split's, in file
//   order; TRL's map batches of per_device_train_batch_size, for the held-out rows too), row j
//   takes row j - 1's completion and the first row the last one's, with its own prompt: the
//   mismatched pairs whose log-ratio estimates the KL term. A last run of one row keeps its own.
// The micro-batches then visit the rows in file order every epoch (TRL requires its sequential
// sampler), so that each micro-batch is one run and its KL rows hold its own completions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/preference_pairs.h"

namespace qtrain::engine::data {

// An axolotl KTO dataset type: a row of its layout as KTO's text row (preference_types.h).
using KtoRowType = std::function<nlohmann::ordered_json(const nlohmann::ordered_json& row, const std::string& where)>;

// A file of KTO rows: pre-tokenized ("prompt_ids", "completion_ids", "label"), text or
// conversations ("prompt", "completion", "label", through `text`, which tokenizes a pair row), or
// pairs (unpaired, see the Note); with `type`, every row is first written as KTO's text row by it.
// "label" must be true or false; every id in [0, vocab_size); every completion must hold a token.
// The KL completions are left empty (with_kl_completions). Errors name the file, the line and the
// key.
std::vector<PreferencePair> read_kto_jsonl(const std::filesystem::path& path,
                                           int64_t vocab_size,
                                           const PreferenceRowTokenizer& text = nullptr,
                                           const KtoRowType& type = nullptr);

// Gives each row its KL completion: the completion of the row before it within its run of
// `run_size` consecutive rows, the run's first row the run's last one's (see the Note).
void with_kl_completions(std::vector<PreferencePair>& rows, int64_t run_size);

}  // namespace qtrain::engine::data
