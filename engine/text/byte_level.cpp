// See byte_level.h.
#include "engine/text/byte_level.h"

#include "engine/text/utf8.h"

namespace qtrain::engine::text {
namespace {

struct Maps {
  std::array<std::string, 256> chars;
  std::array<int, 0x144> bytes;  // code points 0..0x143 cover all 256 characters

  Maps() {
    bytes.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool same = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = same ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next++);
      utf8_append(chars[b], c);
      bytes[c] = b;
    }
  }
};

const Maps& maps() {
  static const Maps m;
  return m;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  return maps().chars;
}

std::optional<unsigned char> byte_level_byte(char32_t c) {
  if (c >= maps().bytes.size() || maps().bytes[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(maps().bytes[c]);
}

}  // namespace qtrain::engine::text
