// The first tokens of a text that may be far longer than a sample can hold. Tokenizing a 100 MB
// row whole (3 GB of token ids, spans and merge state) only to keep sequence_len tokens of it is
// what this avoids; see Note [Leading tokens].
#pragma once

#include <cstddef>
#include <string_view>

#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

// The first bytes a cut tokenization looks at for `max_tokens` tokens: kLeadingBytesPerToken
// per token and kLeadingMargin more. Texts up to this size are tokenized whole.
inline constexpr size_t kLeadingBytesPerToken = 16;
inline constexpr size_t kLeadingMargin = 4096;
size_t leading_prefix_bytes(size_t max_tokens);

// tokenizer.tokenize(text, add_special_tokens), except that when the text holds more than
// `max_tokens` tokens the result may hold only its first max_tokens + 1 of them (enough to tell
// that the text is too long, and the same as the whole text's). `*cut` says whether it was cut.
TokenizedText tokenize_leading(const TextTokenizer& tokenizer,
                               std::string_view text,
                               bool add_special_tokens,
                               size_t max_tokens,
                               bool* cut = nullptr);

}  // namespace qtrain::engine::data
