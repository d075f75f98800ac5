// A dataset's `split` as the Hugging Face `datasets` library reads it for a local file, which has
// the one split "train": `train` (every row), or a slice of it, `train[FROM:TO]`, each bound
// optional, a row count or (when either bound ends in %) a percentage of the rows, negative from
// the end. axolotl's Gemma 4 and Qwen3 examples write `split: train[:10%]`.
//
// Percent bounds become rows as `datasets` computes them (ReadInstruction's "closest" rounding):
// round(bound * rows / 100), halves to even as Python rounds; then a negative bound counts from the
// end and both are clamped to [0, rows]. Concatenated splits (`a+b`) and the `(pct1_dropremainder)`
// rounding are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace qtrain::engine::config {

struct SplitSlice {
  std::optional<int64_t> from, to;  // unset: the start, the end
  bool percent = false;
  bool operator==(const SplitSlice&) const = default;
};

// The slice `split` names, or the problem with it (a message without the key, for the config
// reader to place).
struct ParsedSplit {
  SplitSlice slice;
  std::string problem;
};
ParsedSplit parse_split(const std::string& split);

// The rows [first, last) of a file of `rows` rows that `slice` selects.
std::pair<int64_t, int64_t> split_rows(const SplitSlice& slice, int64_t rows);

}  // namespace qtrain::engine::config
