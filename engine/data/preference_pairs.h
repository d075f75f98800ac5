// Preference data: pairs of a prompt with a chosen and a rejected completion, as TRL's DPOTrainer
// reads them, batched as its DataCollatorForPreference batches them. See Note [Preference batch].
//
// Note [Preference batch]
// A micro-batch of B pairs is one batch of 2B rows, the B chosen rows (prompt + chosen) and then
// the B rejected rows (prompt + rejected), so that one forward computes both (TRL concatenates
// them the same way). Each row is truncated on its own to max_length tokens, keeping its start
// (TRL's default truncation_mode, keep_start), right-padded with pad_id to
// the longest row; its labels are its ids on the completion's tokens and -100 on the prompt and
// the padding (its row labels: its ids on every token, for ORPO's NLL of the whole chosen row and
// the positions of the logits metrics). A row's log-likelihood is then the sum of the log-probabilities of its labels
// (CausalLM::sequence_log_probs): the completion given the prompt.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "engine/data/data_loader.h"

namespace qtrain::engine::data {

struct PreferencePair {
  std::vector<int64_t> prompt, chosen, rejected;
  // KTO's label (Note [KTO rows] in kto_rows.h: a KTO row's completion is `chosen`, its KL
  // completion `rejected`); false for pairs.
  bool desirable = false;
  // The reference's log-likelihoods of the chosen and the rejected row, where they were computed
  // before training (Note [Precomputed reference] in engine/train/preference_step.h).
  std::optional<std::array<float, 2>> reference = std::nullopt;
};

struct PreferenceBatch {
  at::Tensor input_ids;   // int64 [2B, T]: chosen rows, then rejected rows
  at::Tensor labels;      // int64 [2B, T]: the completion's ids, -100 elsewhere
  at::Tensor row_labels;  // int64 [2B, T]: every token's id (prompt and completion), -100 on the padding
  int64_t pairs = 0;      // B
  int64_t tokens = 0;     // tokens that are not padding
};

PreferenceBatch collate_pairs(const std::vector<PreferencePair>& pairs, int64_t max_length, int64_t pad_id);

// Makes the pair of a row that is not pre-tokenized (text or a conversation: preference_rows.h);
// `where` names the file and line for errors.
using PreferenceRowTokenizer =
    std::function<PreferencePair(const nlohmann::ordered_json& row, const std::string& where)>;

// A JSONL (or .json) file of pairs: pre-tokenized rows ("prompt_ids", "chosen_ids",
// "rejected_ids", as TRL tokenizes them), or rows of text or conversations that `text` tokenizes
// (refused where it is null). Every id must be in [0, vocab_size); each completion must have a
// token. Errors name the file, the line and the key.
// With `all_text` every row goes to `text` (a dataset type that reads its own fields).
std::vector<PreferencePair> read_preference_jsonl(const std::filesystem::path& path,
                                                  int64_t vocab_size,
                                                  const PreferenceRowTokenizer& text = nullptr,
                                                  bool all_text = false);

// Micro-batches of pairs, epoch after epoch: epoch e visits the pairs in the order
// seeded_permutation(n, seed + e), micro_batch_size at a time (the epoch's last may be smaller),
// as DataLoader visits samples without packing (both through EpochOrder, data_loader.h); or, with
// `sequential`, in file order every epoch (KTO's, whose micro-batches are its KL chunks).
class PairLoader {
 public:
  using Position = LoaderPosition;  // as a checkpoint records it
  PairLoader(std::vector<PreferencePair> pairs, int64_t micro_batch_size, uint64_t seed, bool sequential = false);
  int64_t batches_per_epoch() const { return order_.batches_per_epoch(); }
  // The pairs of the batch at position(), then advances.
  std::vector<PreferencePair> next();
  Position position() const { return order_.position(); }
  void seek(Position p);
  // Every pair, in file order (for a pass over all of them).
  std::vector<PreferencePair>& pairs() { return pairs_; }

 private:
  std::vector<PreferencePair> pairs_;
  EpochOrder order_;
};

}  // namespace qtrain::engine::data
