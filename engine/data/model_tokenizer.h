// Which tokenizer a model's text datasets go through; decided once, here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

// `base_model`/tokenizer.json: that tokenizer (HfTokenizer); its ids must fit `vocab_size` (the
// model's embedding rows). No tokenizer file and a vocabulary that holds the built-in byte
// tokenizer's ids (the demo model): ByteTokenizer. Otherwise null: only pre-tokenized data.
std::unique_ptr<TextTokenizer> model_tokenizer(const std::filesystem::path& base_model, int64_t vocab_size);

// Whether that choice is the byte tokenizer: no tokenizer file (a SentencePiece-only folder's
// tokenizer.model counts as one; its ids are not the byte tokenizer's) and a vocabulary that
// holds the byte tokenizer's ids.
bool uses_byte_tokenizer(const std::filesystem::path& base_model, int64_t vocab_size);

}  // namespace qtrain::engine::data
