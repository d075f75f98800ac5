// GPT-2's byte-to-character map, used by the ByteLevel pre-tokenizer and decoder.
//
// Note [ByteLevel map]
// Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to the code point of the same value; the other
// 68 bytes (0x00-0x20, 0x7F-0xA0, 0xAD), in increasing order, map to U+0100, U+0101, ... So a
// space is 'Ġ' (U+0120), '\n' is 'Ċ' (U+010A). Every byte-level vocabulary is written in these
// characters.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace qtrain::engine::text {

// The UTF-8 encoding of the character each byte maps to.
const std::array<std::string, 256>& byte_level_chars();
// The byte a character maps back from, or nullopt when it is not one of the 256.
std::optional<unsigned char> byte_level_byte(char32_t c);

}  // namespace qtrain::engine::text
