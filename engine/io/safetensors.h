// Safetensors files: a validating, memory-mapped, zero-copy reader and an atomic writer.
//
// Every weight qtrain reads (Hugging Face models, PEFT adapters, run state) and every adapter it
// writes is a safetensors file, so this is the one place that trusts or produces those bytes.
// The reader applies all of the reference implementation's checks (huggingface/safetensors
// `read_metadata` + `Metadata::validate`) before any tensor is handed out; the writer lays files
// out exactly as the reference does (same tensor order, same header padding), so Python's
// `safetensors.torch.load_file` reads them and produces the same bytes for the same tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qtrain::engine::io {

struct TensorInfo {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  // Half-open byte range [begin, end) relative to the start of the data buffer (after the header).
  uint64_t begin;
  uint64_t end;
};

class SafetensorsFile {
 public:
  // Maps and validates the whole file; every error names the file and, where there is one, the
  // tensor. Nothing is read lazily afterwards that could still fail.
  static SafetensorsFile open(const std::filesystem::path& path);

  // Sorted by data_offsets, i.e. in the order the bytes lie in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.contains(name); }
  const TensorInfo& info(const std::string& name) const;
  // A CPU tensor that views the mapping when its bytes are aligned for its dtype, else a copy.
  // The tensor keeps the mapping alive, so it may outlive this object. Writing to a view is
  // allowed and never reaches the file (the mapping is private copy-on-write).
  at::Tensor tensor(const std::string& name) const;
  // "__metadata__": string -> string; empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Mapping;

  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  uint64_t data_start_ = 0;  // 8 + header length: where offset 0 of the data buffer lies
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Every tensor of the file, as SafetensorsFile::tensor returns them.
std::map<std::string, at::Tensor> safetensors_load(const std::filesystem::path& path);

// Writes `tensors` (any device, layout or strides; copied to CPU contiguous one at a time) with
// `metadata` plus {"format": "pt"}, which transformers requires. Names must be unique, non-empty
// UTF-8 and not "__metadata__". The file is written to "<path>.tmp", fsynced and renamed over
// `path`, so a crash leaves either the old file or the new one, never a torn one; SafetensorsFile
// objects and tensors still mapping the old file keep seeing the old bytes.
void safetensors_save(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace qtrain::engine::io
