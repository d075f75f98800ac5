// A Hugging Face tokenizer loaded from a model folder (tokenizer.json, and tokenizer_config.json
// when present), giving the ids HF `tokenizers` 0.23.3 gives for the same file, token for
// token, with no Python. See Note [Encode pipeline]; docs/DATA.md lists what is supported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/added_tokens.h"
#include "engine/text/bpe.h"
#include "engine/text/encoding.h"

namespace qtrain::engine::text {

class Normalizer;
class PreTokenizer;
class PostProcessor;
class Decoder;

// What tokenizer_config.json says next to the tokenizer (all optional).
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // The chat template text: chat_template.jinja beside tokenizer_config.json, which transformers
  // reads in its place, else tokenizer_config.json's when it is one string (a list of named
  // templates is not read yet).
  std::optional<std::string> chat_template;
};

// Thread safety: the const methods (encode, decode, lookups) may run on one instance from many
// threads at once. Their only shared mutable state is the BPE cache, which locks (See Note [BPE
// cache]); regexes are compiled once and searched with a match region per call; utf8proc and the
// byte tables are read-only.
class Tokenizer {
 public:
  // `dir`/tokenizer.json (required) and `dir`/tokenizer_config.json (optional).
  static Tokenizer load(const std::filesystem::path& dir);
  // One tokenizer.json text; `file` names it in errors.
  static Tokenizer from_json(const std::string& json_text, const std::string& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // HF `Tokenizer.encode(text, add_special_tokens)`. `text` must be valid UTF-8 (else an error
  // saying where it is not).
  Encoding encode(std::string_view text, bool add_special_tokens) const;
  std::vector<int32_t> encode_ids(std::string_view text, bool add_special_tokens) const {
    return encode(text, add_special_tokens).ids;
  }
  // HF `Tokenizer.decode(ids, skip_special_tokens)`: ids it does not know are skipped, as HF does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // HF get_vocab_size(with_added_tokens=True): model vocabulary plus added tokens not in it.
  size_t vocab_size() const;

  // HF `add_tokens([AddedToken(content, normalized=False)])`, or with `special`
  // `add_special_tokens`: a token the tokenizer does not have gets the next id, one of the
  // model's vocabulary becomes an added token with its id (cut out of text before the model sees
  // it, as HF does), an added token stays as it is. Returns the id. Not for a tokenizer that other
  // threads use.
  int32_t add_token(const std::string& content, bool special);

  const TokenizerConfig& config() const { return config_; }

 private:
  Tokenizer();
  std::string file_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<Bpe> model_;
  AddedTokens added_;
  TokenizerConfig config_;
};

// Per token, the code point range of `text` (Python string indices, as HF reports offsets to
// Python) for byte offsets made by Tokenizer::encode on `text`.
std::vector<std::pair<size_t, size_t>> char_offsets(std::string_view text, const std::vector<Span>& byte_offsets);

}  // namespace qtrain::engine::text
