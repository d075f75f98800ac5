// `dataset_prepared_path`: a folder of tokenized datasets, so that a rerun (a resume, a second
// run on the same data) skips tokenizing. See Note [Prepared dataset cache].
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/pretokenized.h"

namespace qtrain::engine::data {

// Note [Prepared dataset cache]
// An entry is named by a key over everything that shapes its samples: the tokenizer files'
// bytes (tokenizer.json, tokenizer_config.json; none for the byte tokenizer), the data file's
// bytes, and the sample-shaping settings (the dataset's type and keys, the chat template text,
// eot_tokens, sequence_len, train_on_inputs) with a format version. Any change gives another key,
// so a stale entry is never read; entries are written atomically, so a torn one never exists.
// The hash is 64-bit FNV-1a, not a cryptographic one: it guards against mistakes, not tampering.
std::string prepared_key(const std::vector<std::filesystem::path>& files, const std::string& settings);

// The samples stored under `key` in `dir`, or nothing when there is no such entry.
std::optional<std::vector<Sample>> read_prepared(const std::filesystem::path& dir, const std::string& key);
// Stores `samples` under `key` in `dir` (created when missing).
void write_prepared(const std::filesystem::path& dir, const std::string& key, const std::vector<Sample>& samples);
std::filesystem::path prepared_file(const std::filesystem::path& dir, const std::string& key);

}  // namespace qtrain::engine::data
