// The built-in tokenizer of qtrain's demo model: one token per UTF-8 byte plus three specials.
// It needs no vocabulary file, so the demo trains from plain text on a fresh machine; real
// models bring a Hugging Face tokenizer.json (later).
//
// Ids: 0..255 are the bytes (id = byte value), 256 = BOS "<s>", 257 = EOS "</s>", 258 = PAD;
// vocab_size() = 259.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

class ByteTokenizer : public TextTokenizer {
 public:
  // The bytes of `text`, no special tokens (callers add BOS/EOS where the format wants them).
  // Any byte string is accepted: invalid UTF-8 round-trips unchanged.
  std::vector<int64_t> encode(std::string_view text) const;
  // Bytes back to text; BOS/EOS/PAD are written as "<s>", "</s>", "<pad>", or left out with
  // `skip_special_tokens`. An id outside the vocabulary is an error.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const override;

  int64_t bos() const { return 256; }
  int64_t eos() const { return 257; }
  int64_t pad() const { return 258; }
  int64_t vocab_size() const override { return 259; }

  // As TextTokenizer: add_special_tokens puts BOS first, as Llama's tokenizer does.
  TokenizedText tokenize(std::string_view text, bool add_special_tokens) const override;
  int64_t eos_id() const override { return eos(); }
  int64_t pad_id() const override { return pad(); }
  std::optional<int64_t> id_of(std::string_view token) const override;
  std::string bos_token() const override { return "<s>"; }
  std::string eos_token() const override { return "</s>"; }
  // None: chat datasets need a model's tokenizer.json.
  std::optional<std::string> chat_template() const override { return std::nullopt; }
};

}  // namespace qtrain::engine::data
