// Pre-tokenized JSONL datasets: one JSON object per line with "input_ids" (a list of token ids)
// and optionally "labels" (same length, -100 = not predicted) and "attention_mask", as axolotl
// accepts a dataset entry without `type`. Rows longer than the sequence length are truncated.
//
// Also the types every dataset format ends in (Sample) and a micro-batch of them (Batch), and the
// JSONL line reader the text formats (dataset.h) share, so that all formats report bad lines alike.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

namespace qtrain::engine::data {

struct Sample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;  // same length; -100 where the token is not predicted
};

// Calls `visit(row, where)` for each non-blank line of a JSONL file, `where` being "file:line"
// for messages, or for each element of a .json file that holds one JSON array of rows ("file:
// row [i]"). Unreadable files, invalid JSON and rows that are not JSON objects are errors that
// name the file and line or element. Returns the number of rows visited.
int64_t for_each_jsonl_row(
    const std::filesystem::path& path,
    const std::function<void(const nlohmann::ordered_json& row, const std::string& where)>& visit);

// row[key] as a list of integers; another type is an error that names `where` and the key.
std::vector<int64_t> int_list(const nlohmann::ordered_json& row, const char* key, const std::string& where);
// Each id in [0, vocab_size), or -100 where `ignore` allows it (labels); an error names `where`,
// the key and the index.
void check_ids(
    const std::vector<int64_t>& ids, const char* key, int64_t vocab_size, bool ignore, const std::string& where);

// One line of a JSONL file as a JSON object; invalid JSON or another JSON type is an error that
// names `where` ("file:line").
nlohmann::ordered_json parse_jsonl_row(const std::string& line, const std::string& where);

// Every error names the file, the line and the fix. Empty lines are skipped. Ids must lie in
// [0, vocab_size) (labels may also be -100). An "attention_mask" removes the padding it marks at
// the start or end of a row (See Note [Pre-tokenized attention_mask] in pretokenized.cpp).
std::vector<Sample> read_pretokenized_jsonl(const std::filesystem::path& path,
                                            int64_t sequence_len,
                                            int64_t vocab_size);

// `samples` as the JSONL that read_pretokenized_jsonl reads: {"input_ids": [...], "labels": [...]}
// per line.
std::string pretokenized_jsonl(const std::vector<Sample>& samples);

// Note [Packed batch layout]
// A row of a batch holds one sample or, with sample packing, several samples back to back
// followed by padding. segment_ids say which sample of its row each token belongs to (0, 1, ...;
// -1 on padding) and attention must not cross segments; position_ids restart at 0 with each
// sample, so a packed sample sees the same positions as it would alone. Labels follow
// transformers' convention (position t predicts labels[t + 1]), so the last token of a sample
// would predict the first token of the next one: the label of every segment start is therefore
// -100, and the shifted loss never crosses a sample boundary. (The first token of a row is never
// predicted anyway, so this costs an unpacked row nothing.) Right padding needs no extra mask:
// causal attention never lets a real token see the padding that follows it.
struct Batch {
  at::Tensor input_ids;     // int64 [B, T], right-padded with the pad id
  at::Tensor labels;        // int64 [B, T], -100 on padding and at segment starts
  at::Tensor position_ids;  // int64 [B, T], 0.. within each sample, 0 on padding
  at::Tensor segment_ids;   // int64 [B, T], sample index within the row, -1 on padding

  // Tokens the loss predicts: positions t with labels[t + 1] != -100 inside one segment
  // (segment_ids[t + 1] == segment_ids[t]).
  int64_t tokens() const;
};

// One batch row per entry of `rows`, which lists the samples of that row in order; rows are
// `width` tokens long (padded with `pad_id`). See Note [Packed batch layout].
Batch make_batch_from_rows(const std::vector<Sample>& samples,
                           const std::vector<std::vector<size_t>>& rows,
                           int64_t width,
                           int64_t pad_id);

// Samples [begin, end) as one batch, one sample per row, padded to its longest sample.
Batch make_batch(const std::vector<Sample>& samples, size_t begin, size_t end, int64_t pad_id = 0);

}  // namespace qtrain::engine::data
