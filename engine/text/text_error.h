// The one exception type of engine/text, and the place in a tokenizer file an error points at.
// engine/text does not depend on torch, so it reports with exceptions instead of TORCH_CHECK;
// every message names the file, the JSON path, the value and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace qtrain::engine::text {

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A JSON path inside a file, e.g. `tokenizer.json: normalizer.normalizers[1]`.
struct JsonSite {
  std::string file;
  std::string path;

  JsonSite key(const std::string& k) const { return {file, path.empty() ? k : path + "." + k}; }
  JsonSite index(size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  std::string where() const { return file + ": " + (path.empty() ? "(top level)" : path); }
};

[[noreturn]] inline void fail(const JsonSite& site, const std::string& message) {
  throw TokenizerError(site.where() + ": " + message);
}

}  // namespace qtrain::engine::text
