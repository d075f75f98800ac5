// What the dataset formats need from a tokenizer, so that one code path serves the built-in byte
// tokenizer (the demo model, byte_tokenizer.h) and a model's Hugging Face tokenizer.json
// (hf_tokenizer.h): encode with or without the family's special tokens, with the byte span of
// each token, and the names the chat formats look up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qtrain::engine::data {

struct TokenizedText {
  std::vector<int64_t> ids;
  // Per token, the byte range [first, second) of the text it came from; {0, 0} for tokens the
  // tokenizer added (BOS).
  std::vector<std::pair<size_t, size_t>> spans;
};

// Every method may be called from many threads at once on one instance (the dataset formats
// tokenize rows in parallel, engine/data/row_map.h), and implementations keep it so: the byte
// tokenizer has no state, special_tokens.h's wrapper only reads, and the Hugging Face one is
// engine/text's Tokenizer, whose const methods are thread-safe.
class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  // HF `tokenizer(text, add_special_tokens=...)`: with true, what the family's post-processor
  // adds (a BOS for Llama, nothing for Qwen); no family appends EOS.
  virtual TokenizedText tokenize(std::string_view text, bool add_special_tokens) const = 0;
  // HF `tokenizer.decode(ids, skip_special_tokens=...)`: ids back to text.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const = 0;
  virtual int64_t eos_id() const = 0;
  // The id padding uses (labels there are -100, so only its range matters).
  virtual int64_t pad_id() const = 0;
  virtual std::optional<int64_t> id_of(std::string_view token) const = 0;
  // The names a chat template reads as bos_token / eos_token ("" when the tokenizer has none).
  virtual std::string bos_token() const = 0;
  virtual std::string eos_token() const = 0;
  // The chat template that ships with the tokenizer, when there is one.
  virtual std::optional<std::string> chat_template() const = 0;
  // HF len(tokenizer): ids run below it, and the embeddings need that many rows.
  virtual int64_t vocab_size() const = 0;
  // Adds `content` as HF's add_tokens (with `special`, add_special_tokens) does and returns its id
  // (Note [New tokens] in engine/data/special_tokens.h); nullopt where the tokenizer cannot add
  // tokens (the built-in byte tokenizer). Only before the tokenizer is shared between threads.
  virtual std::optional<int64_t> add_token(const std::string& /*content*/, bool /*special*/) { return std::nullopt; }
};

}  // namespace qtrain::engine::data
