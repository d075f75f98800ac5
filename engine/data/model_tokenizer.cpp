// See model_tokenizer.h.
#include "engine/data/model_tokenizer.h"

#include <c10/util/Exception.h>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/hf_tokenizer.h"

namespace qtrain::engine::data {

std::unique_ptr<TextTokenizer> model_tokenizer(const std::filesystem::path& base_model, int64_t vocab_size) {
  if (std::filesystem::exists(base_model / "tokenizer.json")) {
    auto tokenizer = std::make_unique<HfTokenizer>(HfTokenizer::load(base_model));
    const auto ids = static_cast<int64_t>(tokenizer->tokenizer().vocab_size());
    TORCH_CHECK(ids <= vocab_size,
                (base_model / "tokenizer.json").string(),
                ": the tokenizer has ",
                ids,
                " tokens but config.json says vocab_size ",
                vocab_size,
                "; the tokenizer belongs to another model (qtrain does not resize embeddings)");
    return tokenizer;
  }
  if (uses_byte_tokenizer(base_model, vocab_size)) return std::make_unique<ByteTokenizer>();
  return nullptr;
}

bool uses_byte_tokenizer(const std::filesystem::path& base_model, int64_t vocab_size) {
  return !std::filesystem::exists(base_model / "tokenizer.json") &&
         !std::filesystem::exists(base_model / "tokenizer.model") && vocab_size >= ByteTokenizer().vocab_size();
}

}  // namespace qtrain::engine::data
