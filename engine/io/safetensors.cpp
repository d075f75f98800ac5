// Safetensors reader and writer; see safetensors.h. The format and the checks follow
// huggingface/safetensors `safetensors/src/tensor.rs`.
#include "engine/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "engine/text/json_depth.h"

namespace qtrain::engine::io {

// Safetensors data and the header length are little-endian; both are used in place.
static_assert(std::endian::native == std::endian::little, "qtrain's safetensors I/O assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference's MAX_HEADER_SIZE
constexpr uint64_t kMaxOffset = uint64_t{1} << 48;
constexpr uint64_t kLengthBytes = 8;  // the u64 header length that starts every file

struct Dtype {
  const char* name;
  at::ScalarType type;
};

// In the order of the reference's `Dtype` enum (ascending element size), which the writer sorts
// by, descending, so that every tensor starts aligned for its element size. The reference's
// C64, F4, F6_*, F8_E8M0 and F8_*FNUZ are not supported. Every supported dtype is at least one
// byte wide, so the reference's sub-byte check (MisalignedSlice) cannot fail here.
constexpr Dtype kDtypes[] = {
    {"BOOL", at::kBool},
    {"U8", at::kByte},
    {"I8", at::kChar},
    {"F8_E5M2", at::kFloat8_e5m2},
    {"F8_E4M3", at::kFloat8_e4m3fn},
    {"I16", at::kShort},
    {"U16", at::kUInt16},
    {"F16", at::kHalf},
    {"BF16", at::kBFloat16},
    {"I32", at::kInt},
    {"U32", at::kUInt32},
    {"F32", at::kFloat},
    {"F64", at::kDouble},
    {"I64", at::kLong},
    {"U64", at::kUInt64},
};

std::string supported_dtypes() {
  std::string out;
  for (const Dtype& d : kDtypes) {
    out += out.empty() ? "" : ", ";
    out += d.name;
  }
  return out;
}

// Index into kDtypes, or nullopt.
std::optional<size_t> dtype_index(at::ScalarType type) {
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    if (kDtypes[i].type == type) {
      return i;
    }
  }
  return std::nullopt;
}

const char* dtype_name(at::ScalarType type) {
  return kDtypes[*dtype_index(type)].name;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

// Position of the first byte that is not well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or nullopt when all of `s` is.
std::optional<size_t> invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    uint32_t cp = lead;
    uint32_t min = 0;
    if (lead >= 0x80) {
      if ((lead & 0xE0) == 0xC0) {
        len = 2, cp = lead & 0x1F, min = 0x80;
      } else if ((lead & 0xF0) == 0xE0) {
        len = 3, cp = lead & 0x0F, min = 0x800;
      } else if ((lead & 0xF8) == 0xF0) {
        len = 4, cp = lead & 0x07, min = 0x10000;
      } else {
        return i;
      }
      if (s.size() - i < len) {
        return i;
      }
      for (size_t k = 1; k < len; ++k) {
        const auto cont = static_cast<unsigned char>(s[i + k]);
        if ((cont & 0xC0) != 0x80) {
          return i;
        }
        cp = (cp << 6) | (cont & 0x3F);
      }
      if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return i;
      }
    }
    i += len;
  }
  return std::nullopt;
}

// Builds the header's JSON value as nlohmann's own DOM parser does, and rejects duplicate keys
// in any object: nlohmann keeps the last of two equal keys silently; the format forbids them
// because two readers could then see two different tensors (or dtypes, or offsets) under one
// name. A SAX handler rather than a parser callback, because nlohmann's callback parser scans the
// enclosing object for discarded values each time an object ends: quadratic in the number of
// tensors (64 k tensors took 17 s, 1 M never finished).
class HeaderSax : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  HeaderSax(nlohmann::json& root, const std::string& where) : json_sax_dom_parser(root), where_(where) {}

  bool start_object(std::size_t size) {
    open_objects_.emplace_back();
    return json_sax_dom_parser::start_object(size);
  }
  bool end_object() {
    open_objects_.pop_back();
    return json_sax_dom_parser::end_object();
  }
  bool key(std::string& key) {
    if (open_objects_.size() == 1) tensor_ = key;
    TORCH_CHECK(open_objects_.back().insert(key).second,
                where_,
                ": header has the key '",
                key,
                "' twice",
                open_objects_.size() == 1 ? std::string() : " inside '" + tensor_ + "'",
                "; duplicate keys are not allowed, rewrite the file without them");
    return json_sax_dom_parser::key(key);
  }

 private:
  const std::string& where_;
  std::vector<std::set<std::string>> open_objects_;  // keys seen so far, innermost object last
  std::string tensor_;  // the top-level key being parsed, to say where a nested duplicate is
};

nlohmann::json parse_header(std::string_view header, const std::string& where) {
  const auto problem = text::json_depth_problem(header);
  TORCH_CHECK(problem.empty(), where, ": header ", problem, "; the file is corrupt");
  nlohmann::json root;
  HeaderSax sax(root, where);
  try {
    nlohmann::json::sax_parse(header.begin(), header.end(), &sax);
  } catch (const nlohmann::json::parse_error& e) {
    TORCH_CHECK(false, where, ": header is not valid JSON (", e.what(), "); the file is corrupt");
  }
  return root;
}

uint64_t offset_value(const nlohmann::json& v, const std::string& where, const std::string& name) {
  TORCH_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= kMaxOffset,
              where,
              ": tensor '",
              name,
              "': data_offsets entry ",
              v.dump(),
              " is not an integer in [0, 2^48]; the header is corrupt");
  return v.get<uint64_t>();
}

TensorInfo parse_tensor_info(const std::string& name, const nlohmann::json& entry, const std::string& where) {
  TORCH_CHECK(entry.is_object(),
              where,
              ": tensor '",
              name,
              "': expected an object with dtype, shape and data_offsets, got a ",
              entry.type_name());
  const auto field = [&](const char* key) -> const nlohmann::json& {
    const auto it = entry.find(key);
    TORCH_CHECK(it != entry.end(),
                where,
                ": tensor '",
                name,
                "' has no \"",
                key,
                "\"; every tensor needs dtype, shape and data_offsets");
    return *it;
  };
  const nlohmann::json& dtype = field("dtype");
  TORCH_CHECK(dtype.is_string(), where, ": tensor '", name, "': dtype ", dtype.dump(), " is not a string");
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  const auto known =
      std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const Dtype& d) { return dtype_str == d.name; });
  TORCH_CHECK(known != std::end(kDtypes),
              where,
              ": tensor '",
              name,
              "': dtype '",
              dtype_str,
              "' is not supported; qtrain reads ",
              supported_dtypes(),
              " (convert the tensor to one of these)");

  const nlohmann::json& shape = field("shape");
  TORCH_CHECK(shape.is_array(), where, ": tensor '", name, "': shape ", shape.dump(), " is not an array");
  std::vector<int64_t> sizes;
  for (const nlohmann::json& dim : shape) {
    // Integers only: nlohmann reads 2.0 as a float and -1 as a signed integer, and torch sizes
    // are int64.
    TORCH_CHECK(
        dim.is_number_unsigned() && dim.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
        where,
        ": tensor '",
        name,
        "': shape ",
        shape.dump(),
        " has the entry ",
        dim.dump(),
        "; shape entries must be integers in [0, 2^63)");
    sizes.push_back(dim.get<int64_t>());
  }

  const nlohmann::json& offsets = field("data_offsets");
  TORCH_CHECK(offsets.is_array() && offsets.size() == 2,
              where,
              ": tensor '",
              name,
              "': data_offsets ",
              offsets.dump(),
              " is not a pair [begin, end]");
  return TensorInfo{.name = name,
                    .dtype = known->type,
                    .shape = std::move(sizes),
                    .begin = offset_value(offsets[0], where, name),
                    .end = offset_value(offsets[1], where, name)};
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& entry, const std::string& where) {
  TORCH_CHECK(entry.is_object(), where, ": __metadata__ must be an object of string values, got a ", entry.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : entry.items()) {
    TORCH_CHECK(value.is_string(),
                where,
                ": __metadata__ key '",
                key,
                "' has the ",
                value.type_name(),
                " value ",
                value.dump(),
                "; metadata values must be strings (write it quoted)");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// Byte size that `info`'s dtype and shape need, with the reference's overflow check.
uint64_t needed_bytes(const TensorInfo& info, const std::string& where) {
  uint64_t bytes = c10::elementSize(info.dtype);
  for (int64_t dim : info.shape) {
    TORCH_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes),
                where,
                ": tensor '",
                info.name,
                "': shape ",
                shape_str(info.shape),
                " holds more bytes than fit in 64 bits; the header is corrupt");
  }
  return bytes;
}

// The reference's Metadata::validate: in offset order the tensors tile the data buffer exactly
// (first begins at 0, each begins where the previous ends) and each holds exactly its bytes.
// Returns the size of the data buffer.
uint64_t validate_layout(const std::vector<TensorInfo>& tensors, const std::string& where) {
  uint64_t expected_begin = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    const std::string offsets = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    TORCH_CHECK(t.end >= t.begin, where, ": tensor '", t.name, "': ", offsets, " end before they begin");
    TORCH_CHECK(previous || t.begin == 0,
                where,
                ": tensor '",
                t.name,
                "': ",
                offsets,
                " do not start at 0, but the first tensor in the data buffer must; the header is corrupt");
    TORCH_CHECK(t.begin <= expected_begin,
                where,
                ": tensor '",
                t.name,
                "': ",
                offsets,
                " leave a gap of ",
                t.begin - expected_begin,
                " bytes after tensor '",
                previous ? previous->name : "",
                "', which ends at ",
                expected_begin,
                "; tensors must be contiguous");
    TORCH_CHECK(t.begin == expected_begin,
                where,
                ": tensor '",
                t.name,
                "': ",
                offsets,
                " overlap tensor '",
                previous ? previous->name : "",
                "', which ends at ",
                expected_begin,
                "; tensors must not share bytes");
    const uint64_t needed = needed_bytes(t, where);
    TORCH_CHECK(t.end - t.begin == needed,
                where,
                ": tensor '",
                t.name,
                "': ",
                offsets,
                " hold ",
                t.end - t.begin,
                " bytes but dtype ",
                dtype_name(t.dtype),
                " shape ",
                shape_str(t.shape),
                " needs ",
                needed);
    expected_begin = t.end;
    previous = &t;
  }
  return expected_begin;
}

// Closes a file descriptor on every path out of a scope.
struct Fd {
  int fd;
  explicit Fd(int fd) : fd(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

}  // namespace

struct SafetensorsFile::Mapping {
  void* base = nullptr;
  size_t size = 0;
  Mapping(void* base, size_t size) : base(base), size(size) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(base, size); }
};

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string where = path.string();
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  TORCH_CHECK(fd.fd >= 0, "cannot open safetensors file ", where, ": ", std::strerror(errno));
  struct stat st {};
  TORCH_CHECK(::fstat(fd.fd, &st) == 0, "cannot stat ", where, ": ", std::strerror(errno));
  TORCH_CHECK(S_ISREG(st.st_mode), where, " is not a regular file; expected a .safetensors file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  TORCH_CHECK(file_size >= kLengthBytes,
              where,
              ": file is ",
              file_size,
              " bytes, too small for the 8-byte header length; it is truncated or not a safetensors file");

  // Private and writable: writing into a returned view copies that page and never reaches the
  // file. MAP_NORESERVE keeps Linux from refusing to map a file larger than RAM + swap, which it
  // does for writable private mappings that reserve their size up front.
  void* base = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd.fd, 0);
  TORCH_CHECK(base != MAP_FAILED, "cannot map ", where, " (", file_size, " bytes): ", std::strerror(errno));
  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = std::make_shared<const Mapping>(base, file_size);
  const auto* bytes = static_cast<const char*>(base);

  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, kLengthBytes);
  TORCH_CHECK(header_len <= kMaxHeaderBytes,
              where,
              ": header length ",
              header_len,
              " exceeds the format's limit of ",
              kMaxHeaderBytes,
              " bytes; the file is corrupt or not a safetensors file");
  TORCH_CHECK(kLengthBytes + header_len <= file_size,
              where,
              ": header length ",
              header_len,
              " runs past the end of the file (",
              file_size,
              " bytes); the file is truncated or corrupt");
  file.data_start_ = kLengthBytes + header_len;

  const std::string_view header(bytes + kLengthBytes, header_len);
  const std::optional<size_t> bad_byte = invalid_utf8_at(header);
  TORCH_CHECK(!bad_byte,
              where,
              ": header is not valid UTF-8 (byte ",
              bad_byte.value_or(0),
              " of the header); the file is corrupt");
  TORCH_CHECK(header.starts_with('{'),
              where,
              ": header must start with '{', found ",
              header.empty() ? std::string("an empty header") : "'" + std::string(1, header[0]) + "'",
              "; the file is corrupt or not a safetensors file");
  const nlohmann::json root = parse_header(header, where);

  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      file.metadata_ = parse_metadata(value, where);
    } else {
      file.tensors_.push_back(parse_tensor_info(key, value, where));
    }
  }
  // Names break ties between empty tensors, so the order never depends on the JSON's.
  std::sort(file.tensors_.begin(), file.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const uint64_t data_len = validate_layout(file.tensors_, where);
  const uint64_t file_data_len = file_size - file.data_start_;
  TORCH_CHECK(data_len <= file_data_len,
              where,
              ": file is truncated: its tensors need ",
              data_len,
              " bytes after the header but only ",
              file_data_len,
              " are there");
  TORCH_CHECK(data_len == file_data_len,
              where,
              ": ",
              file_data_len - data_len,
              " trailing bytes after the last tensor (which ends at ",
              data_len,
              "); the format allows none, the file is corrupt or has something appended");

  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    file.index_.emplace(file.tensors_[i].name, i);
  }
  return file;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = index_.find(name);
  TORCH_CHECK(it != index_.end(),
              path_.string(),
              ": no tensor named '",
              name,
              "' (the file holds ",
              tensors_.size(),
              " tensors); check the name against the checkpoint");
  return tensors_[it->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  char* data = static_cast<char*>(mapping_->base) + data_start_ + t.begin;
  const auto options = at::TensorOptions().dtype(t.dtype);
  if (reinterpret_cast<uintptr_t>(data) % c10::elementSize(t.dtype) == 0) {
    return at::from_blob(
        data, t.shape, [mapping = mapping_](void*) {}, options);
  }
  // Writers other than the reference may place a tensor where its dtype cannot be read in place.
  at::Tensor copy = at::empty(t.shape, options);
  if (t.end > t.begin) {
    std::memcpy(copy.data_ptr(), data, t.end - t.begin);
  }
  return copy;
}

std::map<std::string, at::Tensor> safetensors_load(const std::filesystem::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const TensorInfo& t : file.tensors()) {
    out.emplace(t.name, file.tensor(t.name));
  }
  return out;
}

namespace {

void write_all(int fd, const void* data, size_t size, const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    TORCH_CHECK(n > 0, "cannot write ", what, ": ", std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// "<path>.tmp" while it is being written; removed again unless it was renamed into place.
struct TempFile {
  std::filesystem::path path;
  int fd = -1;
  bool renamed = false;
  explicit TempFile(std::filesystem::path path) : path(std::move(path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd >= 0) {
      ::close(fd);
    }
    if (!renamed) {
      ::unlink(path.c_str());
    }
  }
};

struct Entry {
  const std::string* name;
  const at::Tensor* tensor;
  size_t dtype;  // index into kDtypes
  uint64_t bytes;
};

}  // namespace

void safetensors_save(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string();
  std::vector<Entry> entries;
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(!name.empty(), where, ": a tensor has an empty name; every tensor needs one");
    TORCH_CHECK(name != "__metadata__", where, ": '__metadata__' is reserved for metadata, rename the tensor");
    TORCH_CHECK(!invalid_utf8_at(name), where, ": tensor name '", name, "' is not valid UTF-8");
    TORCH_CHECK(names.insert(name).second, where, ": tensor '", name, "' is given twice; names must be unique");
    TORCH_CHECK(tensor.defined(), where, ": tensor '", name, "' is undefined");
    TORCH_CHECK(!tensor.is_meta(), where, ": tensor '", name, "' is on the meta device and has no data to write");
    const std::optional<size_t> dtype = dtype_index(tensor.scalar_type());
    TORCH_CHECK(dtype,
                where,
                ": tensor '",
                name,
                "' has dtype ",
                tensor.scalar_type(),
                ", which safetensors files here cannot hold; supported: ",
                supported_dtypes(),
                " (convert it first)");
    entries.push_back({&name, &tensor, *dtype, static_cast<uint64_t>(tensor.numel()) * tensor.element_size()});
  }
  // The reference's order: descending dtype (so each tensor is aligned for its element size),
  // then name.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.dtype != b.dtype ? a.dtype > b.dtype : *a.name < *b.name;
  });

  std::map<std::string, std::string> all_metadata = metadata;
  const auto [format, inserted] = all_metadata.emplace("format", "pt");
  TORCH_CHECK(inserted || format->second == "pt",
              where,
              ": metadata 'format' is '",
              format->second,
              "', but these are PyTorch tensors and transformers requires 'pt'; leave 'format' out");
  for (const auto& [key, value] : all_metadata) {
    TORCH_CHECK(!invalid_utf8_at(key) && !invalid_utf8_at(value),
                where,
                ": metadata key '",
                key,
                "' or its value is not valid UTF-8");
  }

  // Keys in the reference writer's order: __metadata__, then the tensors as laid out; within a
  // tensor dtype, shape, data_offsets. Same tensors and metadata give the same bytes as Python.
  nlohmann::ordered_json header;
  header["__metadata__"] = all_metadata;
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    nlohmann::ordered_json& t = header[*e.name];
    t["dtype"] = kDtypes[e.dtype].name;
    t["shape"] = e.tensor->sizes().vec();
    t["data_offsets"] = {offset, offset + e.bytes};
    offset += e.bytes;
  }
  std::string header_bytes = header.dump();
  // Padded with spaces to a multiple of 8 so the data buffer, and with it every tensor, is aligned.
  header_bytes.resize((header_bytes.size() + 7) / 8 * 8, ' ');
  const uint64_t header_len = header_bytes.size();

  TempFile tmp(path.string() + ".tmp");
  const std::string tmp_name = tmp.path.string();
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TORCH_CHECK(tmp.fd >= 0, "cannot create ", tmp_name, " to write ", where, ": ", std::strerror(errno));
  write_all(tmp.fd, &header_len, kLengthBytes, tmp_name);
  write_all(tmp.fd, header_bytes.data(), header_bytes.size(), tmp_name);
  for (const Entry& e : entries) {
    // One tensor at a time, so saving GPU state never holds a second full copy in host memory.
    at::Tensor t = e.tensor->detach();
    if (t.layout() != at::kStrided) {
      t = t.to_dense();
    }
    t = t.to(at::kCPU).contiguous();
    write_all(tmp.fd, t.const_data_ptr(), e.bytes, tmp_name);
  }
  TORCH_CHECK(::fsync(tmp.fd) == 0, "cannot flush ", tmp_name, ": ", std::strerror(errno));
  const int fd = std::exchange(tmp.fd, -1);
  TORCH_CHECK(::close(fd) == 0, "cannot close ", tmp_name, ": ", std::strerror(errno));
  TORCH_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0,
              "cannot rename ",
              tmp_name,
              " to ",
              where,
              ": ",
              std::strerror(errno));
  tmp.renamed = true;

  // The rename is durable only once the directory that holds it is flushed.
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  TORCH_CHECK(dir_fd.fd >= 0 && ::fsync(dir_fd.fd) == 0,
              where,
              " was written, but flushing its directory failed (",
              std::strerror(errno),
              "); a crash now could lose the rename");
}

}  // namespace qtrain::engine::io
