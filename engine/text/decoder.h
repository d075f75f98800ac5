// Decoders of tokenizer.json (`decoder`): ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace and Sequence, as HF `tokenizers` 0.23.3 chains them (decode_chain on the list of
// token strings, then the results joined).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/text/text_error.h"

namespace qtrain::engine::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const JsonSite& site);

}  // namespace qtrain::engine::text
