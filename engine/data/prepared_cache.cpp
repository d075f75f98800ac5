// See prepared_cache.h.
#include "engine/data/prepared_cache.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>

#include <c10/util/Exception.h>

#include "engine/io/durable_file.h"

namespace qtrain::engine::data {
namespace {

// Bumped when the entry format or the tokenization rules change.
constexpr const char* kFormat = "qtrain-prepared-1";

struct Fnv1a {
  uint64_t h = 14695981039346656037ull;
  void add(std::string_view bytes) {
    for (const char c : bytes) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
    // A separator, so that ("ab", "c") and ("a", "bc") differ.
    h ^= 0xff;
    h *= 1099511628211ull;
  }
};

}  // namespace

std::string prepared_key(const std::vector<std::filesystem::path>& files, const std::string& settings) {
  Fnv1a fnv;
  fnv.add(kFormat);
  fnv.add(settings);
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    // A missing file hashes as absent, not as empty.
    fnv.add(in.good() ? std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())
                      : std::string("\x01missing"));
  }
  char key[17];
  std::snprintf(key, sizeof(key), "%016llx", static_cast<unsigned long long>(fnv.h));
  return key;
}

std::filesystem::path prepared_file(const std::filesystem::path& dir, const std::string& key) {
  return dir / (key + ".jsonl");
}

std::optional<std::vector<Sample>> read_prepared(const std::filesystem::path& dir, const std::string& key) {
  const auto file = prepared_file(dir, key);
  if (!std::filesystem::exists(file)) return std::nullopt;
  // Written by qtrain from checked samples; the ids were checked against the model then.
  return read_pretokenized_jsonl(file, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max());
}

void write_prepared(const std::filesystem::path& dir, const std::string& key, const std::vector<Sample>& samples) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  TORCH_CHECK(!error,
              dir.string(),
              ": cannot create the dataset_prepared_path folder (",
              error.message(),
              "); set dataset_prepared_path to a writable folder or remove the key");
  io::write_file_atomic(prepared_file(dir, key), pretokenized_jsonl(samples));
}

}  // namespace qtrain::engine::data
