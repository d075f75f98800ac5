// See gguf_writer.h and Note [GGUF layout] there.
#include "engine/io/gguf_writer.h"

#include <cstring>
#include <fstream>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace qtrain::engine::io {
namespace {

enum ValueType : uint32_t {
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
};

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and ARM hosts are little-endian, as GGUF is
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

template <typename T>
std::string array_of(uint32_t type, const std::vector<T>& values) {
  std::string out;
  put<uint32_t>(out, type);
  put<uint64_t>(out, values.size());
  for (const auto& v : values) put<T>(out, v);
  return out;
}

uint64_t aligned(uint64_t n) {
  return (n + GgufWriter::kAlignment - 1) / GgufWriter::kAlignment * GgufWriter::kAlignment;
}

}  // namespace

void GgufWriter::add(const std::string& key, uint32_t type, std::string bytes) {
  for (const auto& e : entries_) TORCH_CHECK(e.key != key, "GGUF metadata key '", key, "' given twice");
  entries_.push_back({key, type, std::move(bytes)});
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  std::string b;
  put_string(b, value);
  add(key, kString, std::move(b));
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) {
  std::string b;
  put(b, value);
  add(key, kUint32, std::move(b));
}

void GgufWriter::add_int32(const std::string& key, int32_t value) {
  std::string b;
  put(b, value);
  add(key, kInt32, std::move(b));
}

void GgufWriter::add_float32(const std::string& key, float value) {
  std::string b;
  put(b, value);
  add(key, kFloat32, std::move(b));
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  std::string b;
  put<uint8_t>(b, value ? 1 : 0);
  add(key, kBool, std::move(b));
}

void GgufWriter::add_uint64(const std::string& key, uint64_t value) {
  std::string b;
  put(b, value);
  add(key, kUint64, std::move(b));
}

void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& values) {
  std::string b;
  put<uint32_t>(b, kString);
  put<uint64_t>(b, values.size());
  for (const auto& v : values) put_string(b, v);
  add(key, kArray, std::move(b));
}

void GgufWriter::add_int32s(const std::string& key, const std::vector<int32_t>& values) {
  add(key, kArray, array_of(kInt32, values));
}

void GgufWriter::add_float32s(const std::string& key, const std::vector<float>& values) {
  add(key, kArray, array_of(kFloat32, values));
}

void GgufWriter::add_tensor(const std::string& name,
                            std::vector<int64_t> shape,
                            ops::GgmlType type,
                            std::function<at::Tensor()> make) {
  for (const auto& t : tensors_) TORCH_CHECK(t.name != name, "GGUF tensor '", name, "' given twice");
  TORCH_CHECK(type != ops::GgmlType::q8_0 || (!shape.empty() && shape.back() % 32 == 0),
              "GGUF tensor '",
              name,
              "': Q8_0 needs rows of a multiple of 32 values; write it as F16 or F32");
  tensors_.push_back({name, std::move(shape), type, std::move(make)});
}

void GgufWriter::write(const std::filesystem::path& path, const std::function<void(size_t, size_t)>& progress) const {
  std::string head;
  head += "GGUF";
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, entries_.size());
  for (const auto& e : entries_) {
    put_string(head, e.key);
    put<uint32_t>(head, e.type);
    head += e.bytes;
  }
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    int64_t elements = 1;
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) {
      put<uint64_t>(head, static_cast<uint64_t>(*d));
      elements *= *d;
    }
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offsets.push_back(offset);
    offset = aligned(offset + static_cast<uint64_t>(ops::ggml_nbytes(t.type, elements)));
  }
  head.resize(aligned(head.size()), '\0');

  auto partial = path;
  partial += ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  TORCH_CHECK(out.good(), partial.string(), ": cannot be written");
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  uint64_t written = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    const at::Tensor values = t.make();
    TORCH_CHECK(values.sizes().vec() == t.shape,
                "GGUF tensor '",
                t.name,
                "': made with shape ",
                values.sizes(),
                ", described as ",
                at::IntArrayRef(t.shape));
    const auto bytes = ops::ggml_encode(values.to(at::kFloat), t.type);
    const std::string gap(offsets[i] - written, '\0');
    out.write(gap.data(), static_cast<std::streamsize>(gap.size()));
    out.write(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), bytes.numel());
    written = offsets[i] + static_cast<uint64_t>(bytes.numel());
    if (progress) progress(i + 1, tensors_.size());
  }
  out.close();
  TORCH_CHECK(out.good(), partial.string(), ": writing failed (disk full?)");
  std::filesystem::rename(partial, path);
}

}  // namespace qtrain::engine::io
