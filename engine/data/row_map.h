// The rows of a JSONL dataset file mapped to samples on several threads, in file order: the
// driver of every text dataset type (dataset.h, chat_dataset.h). See Note [Parallel rows].
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/config/dataset_split.h"
#include "engine/data/pretokenized.h"

namespace qtrain::engine::data {

struct RowMapOptions {
  // Threads that convert rows; 0: one per core (std::thread::hardware_concurrency), as axolotl's
  // dataset_processes defaults to os.cpu_count().
  int64_t threads = 0;
  // Rows read ahead and converted per round (also capped at 64 MiB of text); bounds what is held
  // besides the output.
  int64_t chunk_rows = 4096;
  // Called on the calling thread about every 100 ms with the rows converted so far and the rows of
  // the file, and once when all are done. Unset: the file is not counted ahead.
  std::function<void(int64_t done, int64_t total)> progress;
  // The rows used, as a dataset's `split` selects them (engine/config/dataset_split.h); counted
  // over the non-blank lines (or array elements), before any row is converted.
  config::SplitSlice slice;
};

// Converts one row (`where` is "file:line" for messages) by appending its samples to `samples`.
// Called from several threads at once: it may read shared state, not write it.
using RowToSamples =
    std::function<void(const nlohmann::ordered_json& row, const std::string& where, std::vector<Sample>& samples)>;

// The samples of every non-blank line of `path`, in file order, the same whatever the number of
// threads. The error of the first failing row (by line) is the one thrown, with its file:line. A
// .json file holding one JSON array of rows is read whole and converted on the calling thread.
std::vector<Sample> map_jsonl_rows(const std::filesystem::path& path,
                                   const RowMapOptions& options,
                                   const RowToSamples& to_samples);

// `threads` with 0 resolved to the number of cores.
int64_t row_map_threads(int64_t threads);

}  // namespace qtrain::engine::data
