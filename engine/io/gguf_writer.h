// Writing GGUF files (version 3), the format llama.cpp, Ollama and LM Studio load: a header,
// typed key-value metadata, tensor descriptions, then the tensor data, each piece aligned to
// general.alignment (32). See Note [GGUF layout].
//
// Note [GGUF layout]
// Little-endian throughout. "GGUF", uint32 version 3, uint64 tensor count, uint64 metadata
// count; each metadata entry: key (uint64 length + UTF-8 bytes), uint32 value type (uint8 0, int8
// 1, uint16 2, int16 3, uint32 4, int32 5, float32 6, bool 7, string 8, array 9, uint64 10, int64
// 11, float64 12), value (an array: uint32 element type, uint64 count, elements); each tensor: name,
// uint32 dimension count, uint64 dimensions innermost first (numpy's shape reversed), uint32 ggml
// type (ops/quant/ggml_types.h), uint64 offset from the start of the data. The data starts at the
// next multiple of the alignment after the descriptions; each tensor's offset is a multiple of it
// too, the gaps zero. The tensors' bytes are produced one at a time while writing, so a file
// larger than memory can be written from tensors made on demand.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ops/quant/ggml_types.h"

namespace qtrain::engine::io {

class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& value);
  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_uint64(const std::string& key, uint64_t value);
  void add_strings(const std::string& key, const std::vector<std::string>& values);
  void add_int32s(const std::string& key, const std::vector<int32_t>& values);
  void add_float32s(const std::string& key, const std::vector<float>& values);

  // A tensor of `shape` (numpy order, outermost first) in `type`, whose float32 values `make`
  // returns when the file is written (then encoded, ops::ggml_encode).
  void add_tensor(const std::string& name,
                  std::vector<int64_t> shape,
                  ops::GgmlType type,
                  std::function<at::Tensor()> make);

  // Writes the file to `path` through a temporary beside it, renamed when complete; `progress`
  // (may be empty) is called after each tensor with its index and the count.
  void write(const std::filesystem::path& path, const std::function<void(size_t, size_t)>& progress = {}) const;

  static constexpr uint64_t kAlignment = 32;

 private:
  struct Entry {
    std::string key;
    uint32_t type;
    std::string bytes;  // the value, encoded
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    ops::GgmlType type;
    std::function<at::Tensor()> make;
  };
  void add(const std::string& key, uint32_t type, std::string bytes);

  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace qtrain::engine::io
