// CRC-32C (Castagnoli, as iSCSI and ext4 use it): the checksum of checkpoint files, so that a
// damaged file (a flipped bit on disk, a torn copy) is refused on resume instead of training on.
// A checksum, not a signature: it detects accidents, not an attacker who rewrites the state file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace qtrain::engine::io {

// `crc` continues an earlier call over the preceding bytes (0 to start).
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);
// The CRC-32C of a file's bytes, read in blocks; errors name the file.
uint32_t crc32c_of_file(const std::filesystem::path& path);
// "crc32c:" and 8 lowercase hex digits, as checkpoints record it.
std::string crc32c_text(uint32_t crc);

}  // namespace qtrain::engine::io
