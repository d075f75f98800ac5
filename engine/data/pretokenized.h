// Pre-tokenized JSONL datasets: one JSON object per line with "input_ids" (a list of token ids)
// and optionally "labels" (same length, -100 = not predicted), as axolotl accepts a dataset
// entry without `type`. Rows longer than the sequence length are truncated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include <ATen/core/Tensor.h>

namespace qtrain::engine::data {

struct Sample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;  // same length; -100 where the token is not predicted
};

// Every error names the file, the line and the fix. Empty lines are skipped.
std::vector<Sample> read_pretokenized_jsonl(const std::filesystem::path& path, int64_t sequence_len);

struct Batch {
  at::Tensor input_ids;  // int64 [B, T], right-padded with `pad_id`
  at::Tensor labels;     // int64 [B, T], -100 on padding
};
// Samples [begin, end) as one batch padded to its longest sample. Causal attention never lets a
// real token see the padding that follows it, so right padding needs no attention mask.
Batch make_batch(const std::vector<Sample>& samples, size_t begin, size_t end, int64_t pad_id = 0);

}  // namespace qtrain::engine::data
