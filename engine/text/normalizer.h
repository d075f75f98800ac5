// Normalizers of tokenizer.json (`normalizer`): NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// Prepend, Replace and Sequence, as HF `tokenizers` 0.23.3 applies them. Any other type, or an
// option these do not know, is an error naming the file and JSON path.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "engine/text/aligned_text.h"
#include "engine/text/text_error.h"

namespace qtrain::engine::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(AlignedText& t) const = 0;
};

// null JSON gives null (no normalizer).
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const JsonSite& site);

}  // namespace qtrain::engine::text
