// See crc32c.h. Slicing-by-8 over the reflected polynomial 0x82F63B78 (eight table lookups per
// eight bytes); no SSE4.2 instruction, so the code and its result do not depend on the CPU.
#include "engine/io/crc32c.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include <c10/util/Exception.h>

namespace qtrain::engine::io {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0u);
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
  return t;
}

constexpr Tables kTables = make_tables();

}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  crc = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    // Bytes in file order, so the result does not depend on the host's endianness.
    const uint32_t lo = crc ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    crc = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^ kTables[4][lo >> 24] ^
          kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^ kTables[0][p[7]];
  }
  for (; n > 0; --n, ++p) crc = (crc >> 8) ^ kTables[0][(crc ^ *p) & 0xff];
  return ~crc;
}

uint32_t crc32c_of_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "cannot read ", path.string(), " (", std::strerror(errno), "); check that it exists");
  std::vector<char> block(1 << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    crc = crc32c(std::string_view(block.data(), static_cast<size_t>(in.gcount())), crc);
  }
  TORCH_CHECK(in.eof(), "cannot read ", path.string(), " to its end; check the disk");
  return crc;
}

std::string crc32c_text(uint32_t crc) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "%08x", crc);
  return std::string("crc32c:") + buffer;
}

}  // namespace qtrain::engine::io
