// Files qtrain reads from users are regular files of a plausible size. A FIFO given as a config
// or dataset would block open() forever, and /dev/zero or /dev/urandom would be read until memory
// runs out; a wrong multi-gigabyte file given as a config would be read whole first. Every reader
// of outside files asks here before it opens one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>

namespace qtrain::engine::text {

// Size caps of the files read whole, far above any real file of the kind.
inline constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;    // YAML run config, config.json, adapter_config.json
inline constexpr uint64_t kMaxTokenizerBytes = uint64_t{1} << 30;  // tokenizer.json (the largest real ones are ~35 MB)
inline constexpr uint64_t kMaxTemplateBytes = uint64_t{16} << 20;  // a chat template file

// Empty when `path` is a regular file (after symlinks) of at most `max_bytes`, or does not exist
// (the caller's open reports that); otherwise what is wrong and the fix, for the caller to prefix
// with the path: "is a FIFO, not a regular file; ...".
std::string regular_file_problem(const std::filesystem::path& path,
                                 uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace qtrain::engine::text
