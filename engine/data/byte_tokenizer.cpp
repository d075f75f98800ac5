// See byte_tokenizer.h.
#include "engine/data/byte_tokenizer.h"

#include <c10/util/Exception.h>

namespace qtrain::engine::data {

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  // Through unsigned char: a plain char is signed on x86, and bytes >= 0x80 must map to 128..255.
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

TokenizedText ByteTokenizer::tokenize(std::string_view text, bool add_special_tokens) const {
  TokenizedText out;
  if (add_special_tokens) {
    out.ids.push_back(bos());
    out.spans.emplace_back(0, 0);
  }
  for (size_t i = 0; i < text.size(); ++i) {
    out.ids.push_back(static_cast<unsigned char>(text[i]));
    out.spans.emplace_back(i, i + 1);
  }
  return out;
}

std::optional<int64_t> ByteTokenizer::id_of(std::string_view token) const {
  if (token == "<s>") return bos();
  if (token == "</s>") return eos();
  if (token == "<pad>") return pad();
  return std::nullopt;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id >= 0 && id < 256) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (skip_special_tokens && id < vocab_size()) {
      continue;
    } else if (id == bos()) {
      text += "<s>";
    } else if (id == eos()) {
      text += "</s>";
    } else if (id == pad()) {
      text += "<pad>";
    } else {
      TORCH_CHECK(false,
                  "ByteTokenizer::decode: id ",
                  id,
                  " at position ",
                  i,
                  " is outside the vocabulary [0, ",
                  vocab_size(),
                  "); were these ids made by another tokenizer?");
    }
  }
  return text;
}

}  // namespace qtrain::engine::data
