// SHA-256 (FIPS 180-4) of a byte string, as lowercase hex: what llama.cpp's converter hashes a
// tokenizer's check ids with (engine/train/gguf_tokenizer.h).
#pragma once

#include <string>
#include <string_view>

namespace qtrain::engine::io {

std::string sha256_hex(std::string_view data);

}  // namespace qtrain::engine::io
