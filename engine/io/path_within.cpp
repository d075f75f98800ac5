// See path_within.h.
#include "engine/io/path_within.h"

#include <algorithm>
#include <system_error>

namespace qtrain::engine::io {

namespace fs = std::filesystem;

fs::path resolved_path(const fs::path& p) {
  std::error_code ec;
  auto r = fs::weakly_canonical(fs::absolute(p), ec);
  if (ec) r = fs::absolute(p).lexically_normal();
  return r.has_filename() ? r : r.parent_path();
}

bool path_within(const fs::path& inner, const fs::path& outer) {
  const auto i = resolved_path(inner), o = resolved_path(outer);
  return std::mismatch(o.begin(), o.end(), i.begin(), i.end()).first == o.end();
}

}  // namespace qtrain::engine::io
