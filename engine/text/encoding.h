// What encoding a text gives: ids, their token strings and where each token came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/text/aligned_text.h"

namespace qtrain::engine::text {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
  // Byte range of the input text each token came from; added by the post-processor (BOS, ...):
  // {0, 0}. Several tokens may share a range (a character split into byte tokens).
  std::vector<Span> offsets;
  // 1 for tokens the post-processor added, 0 for tokens of the text.
  std::vector<uint8_t> special_tokens_mask;
};

}  // namespace qtrain::engine::text
