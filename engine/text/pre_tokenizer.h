// Pre-tokenizers of tokenizer.json (`pre_tokenizer`): ByteLevel, Split, Metaspace, Digits and
// Sequence, as HF `tokenizers` 0.23.3 runs them. Each cuts every piece of a segment into
// smaller pieces (the words the model then tokenizes one by one), and may rewrite them.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "engine/text/aligned_text.h"
#include "engine/text/text_error.h"

namespace qtrain::engine::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by the pieces each of them splits into; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<AlignedText>& pieces) const = 0;
};

// null JSON gives null (the whole segment is one piece).
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j, const JsonSite& site);

}  // namespace qtrain::engine::text
