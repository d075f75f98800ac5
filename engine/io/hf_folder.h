// Hugging Face model folders: `config.json` plus safetensors weights, either one
// `model.safetensors` or shards listed in `model.safetensors.index.json`.
//
// Every base model qtrain trains on, and every merged model it writes, is such a folder. The
// reader checks the whole folder when it opens (the index against the shards' headers) so that a
// broken download fails at once with the file, the tensor and the fix, not in the middle of a
// load; afterwards tensors are zero-copy views of the mapped shards. The writer lays folders out
// the way transformers' save_pretrained (huggingface_hub's shard splitter) does, so transformers
// loads them unchanged.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/io/safetensors.h"

namespace qtrain::engine::io {

// A JSON file of a model folder, parsed after the nesting-depth guard (engine/text/json_depth.h);
// errors name the file.
nlohmann::json parse_json_file(const std::filesystem::path& path,
                               const nlohmann::json::parser_callback_t& callback = nullptr);

// `dir`/config.json as written, checked to be a JSON object; the weight files are not opened.
nlohmann::json read_config_json(const std::filesystem::path& dir);

class HfFolder {
 public:
  // Reads config.json and opens and validates every weight file. `model.safetensors` wins over
  // an index when both are present, as in transformers.
  static HfFolder open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  // config.json as written (no defaults filled in).
  const nlohmann::json& config() const { return config_; }
  bool sharded() const { return sharded_; }

  // Every tensor of every weight file, sorted.
  std::vector<std::string> tensor_names() const;
  bool contains(const std::string& name) const { return where_.contains(name); }
  // A CPU view of the mapped shard (a copy only where the file misaligns the tensor for its
  // dtype); it keeps the mapping alive. Unknown names are an error that names the folder, and so
  // is a float tensor holding a NaN or an infinity (one pass over it, the first time it is read):
  // no trained weight is non-finite, and training on one gives a NaN loss at best.
  at::Tensor tensor(const std::string& name) const;
  at::ScalarType dtype(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  // The weight file that holds `name`, for error messages.
  const std::filesystem::path& file(const std::string& name) const;

 private:
  const SafetensorsFile& file_of(const std::string& name) const;

  std::filesystem::path dir_;
  nlohmann::json config_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> index into files_
};

inline constexpr int64_t kDefaultMaxShardBytes = int64_t{5} << 30;  // transformers' "5GB" default

// Writes `dir`/config.json (2-space indent, sorted keys, trailing newline: what transformers
// writes) and the tensors: one `model.safetensors` when they fit in `max_shard_bytes`, else
// `model-0000k-of-0000N.safetensors` shards and `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {...}}). Tensors go to shards in the given
// order with huggingface_hub's rule (a new shard when the next tensor would overflow the current
// one; a tensor larger than the limit gets a shard of its own). Creates `dir`; every file is
// written atomically (temp file + rename). Weight files of an earlier save in another layout
// (the single file, the index, shards with other names) are removed after the new ones are in
// place, so the folder never mixes two saves.
void save_hf_folder(const std::filesystem::path& dir,
                    const nlohmann::json& config,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                    int64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace qtrain::engine::io
