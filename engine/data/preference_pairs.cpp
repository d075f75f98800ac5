// See preference_pairs.h and Note [Preference batch] there.
#include "engine/data/preference_pairs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "engine/data/pretokenized.h"
#include "ops/nn/cross_entropy.h"

namespace qtrain::engine::data {

PreferenceBatch collate_pairs(const std::vector<PreferencePair>& pairs, int64_t max_length, int64_t pad_id) {
  TORCH_CHECK(!pairs.empty(), "collate_pairs: no pairs");
  TORCH_CHECK(max_length > 1, "collate_pairs: max_length must be at least 2, got ", max_length);
  std::vector<std::vector<int64_t>> ids, labels;
  for (const bool chosen : {true, false}) {
    for (const auto& p : pairs) {
      const auto& completion = chosen ? p.chosen : p.rejected;
      std::vector<int64_t> row = p.prompt, lab(p.prompt.size(), ops::kIgnoreIndex);
      row.insert(row.end(), completion.begin(), completion.end());
      lab.insert(lab.end(), completion.begin(), completion.end());
      if (static_cast<int64_t>(row.size()) > max_length) {
        row.resize(max_length);
        lab.resize(max_length);
      }
      ids.push_back(std::move(row));
      labels.push_back(std::move(lab));
    }
  }
  size_t width = 0;
  for (const auto& r : ids) width = std::max(width, r.size());
  const auto rows = static_cast<int64_t>(ids.size());
  PreferenceBatch b;
  b.input_ids = at::full({rows, static_cast<int64_t>(width)}, pad_id, at::kLong);
  b.labels = at::full({rows, static_cast<int64_t>(width)}, ops::kIgnoreIndex, at::kLong);
  b.row_labels = b.labels.clone();
  auto in = b.input_ids.accessor<int64_t, 2>();
  auto lab = b.labels.accessor<int64_t, 2>();
  auto row_lab = b.row_labels.accessor<int64_t, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t t = 0; t < ids[r].size(); ++t) {
      in[r][t] = ids[r][t];
      lab[r][t] = labels[r][t];
      row_lab[r][t] = ids[r][t];
    }
    b.tokens += static_cast<int64_t>(ids[r].size());
  }
  b.pairs = static_cast<int64_t>(pairs.size());
  return b;
}

std::vector<PreferencePair> read_preference_jsonl(const std::filesystem::path& path,
                                                  int64_t vocab_size,
                                                  const PreferenceRowTokenizer& text,
                                                  bool all_text) {
  std::vector<PreferencePair> pairs;
  for_each_jsonl_row(path, [&](const nlohmann::ordered_json& row, const std::string& where) {
    if (all_text || (!row.contains("prompt_ids") && !row.contains("chosen_ids") && row.contains("chosen"))) {
      TORCH_CHECK(text != nullptr,
                  where,
                  ": a preference row of text or messages needs the model's tokenizer (tokenizer.json beside the "
                  "base model, or tokenizer_config); or give TRL's tokenized \"prompt_ids\", \"chosen_ids\" and "
                  "\"rejected_ids\"");
      auto p = text(row, where);
      check_ids(p.prompt, "prompt", vocab_size, false, where);
      check_ids(p.chosen, "chosen", vocab_size, false, where);
      check_ids(p.rejected, "rejected", vocab_size, false, where);
      TORCH_CHECK(!p.chosen.empty() && !p.rejected.empty(),
                  where,
                  ": \"chosen\" and \"rejected\" must each tokenize to a token past the prompt");
      pairs.push_back(std::move(p));
      return;
    }
    for (const char* key : {"prompt_ids", "chosen_ids", "rejected_ids"}) {
      TORCH_CHECK(row.contains(key),
                  where,
                  ": a preference row needs \"prompt_ids\", \"chosen_ids\" and \"rejected_ids\" (TRL's tokenized "
                  "pairs), or \"chosen\" and \"rejected\" as text or messages; it has no \"",
                  key,
                  "\"");
    }
    PreferencePair p{
        int_list(row, "prompt_ids", where), int_list(row, "chosen_ids", where), int_list(row, "rejected_ids", where)};
    check_ids(p.prompt, "prompt_ids", vocab_size, false, where);
    check_ids(p.chosen, "chosen_ids", vocab_size, false, where);
    check_ids(p.rejected, "rejected_ids", vocab_size, false, where);
    TORCH_CHECK(!p.chosen.empty() && !p.rejected.empty(),
                where,
                ": \"chosen_ids\" and \"rejected_ids\" must each hold a token (a completion to compare)");
    pairs.push_back(std::move(p));
  });
  TORCH_CHECK(!pairs.empty(), path.string(), ": holds no preference pairs");
  return pairs;
}

PairLoader::PairLoader(std::vector<PreferencePair> pairs, int64_t micro_batch_size, uint64_t seed, bool sequential)
    : pairs_(std::move(pairs)), order_(pairs_.size(), micro_batch_size, seed, sequential) {
  TORCH_CHECK(!pairs_.empty(), "PairLoader: no pairs");
}

std::vector<PreferencePair> PairLoader::next() {
  std::vector<PreferencePair> out;
  for (const size_t i : order_.next()) out.push_back(pairs_[i]);
  return out;
}

void PairLoader::seek(Position p) {
  TORCH_CHECK(order_.holds(p),
              "PairLoader: position (epoch ",
              p.epoch,
              ", batch ",
              p.batch,
              ") is outside the data's ",
              batches_per_epoch(),
              " batches per epoch; was the checkpoint saved with other pairs or micro_batch_size?");
  order_.seek(p);
}

}  // namespace qtrain::engine::data
