// A model's Hugging Face tokenizer (tokenizer.json + tokenizer_config.json, read by
// engine/text) behind the TextTokenizer interface the dataset formats use.
#pragma once

#include <filesystem>

#include "engine/data/text_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace qtrain::engine::data {

class HfTokenizer : public TextTokenizer {
 public:
  // `dir` holds tokenizer.json. An EOS token is required (every format appends it): its absence
  // is an error that names tokenizer_config.json and the fix.
  static HfTokenizer load(const std::filesystem::path& dir);

  TokenizedText tokenize(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  int64_t eos_id() const override { return eos_id_; }
  int64_t pad_id() const override { return pad_id_; }
  std::optional<int64_t> id_of(std::string_view token) const override;
  std::string bos_token() const override { return tokenizer_.config().bos_token.value_or(""); }
  std::string eos_token() const override { return tokenizer_.config().eos_token.value_or(""); }
  std::optional<std::string> chat_template() const override { return tokenizer_.config().chat_template; }
  int64_t vocab_size() const override { return static_cast<int64_t>(tokenizer_.vocab_size()); }
  std::optional<int64_t> add_token(const std::string& content, bool special) override {
    return tokenizer_.add_token(content, special);
  }

  const text::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  HfTokenizer(text::Tokenizer tokenizer, int64_t eos_id, int64_t pad_id)
      : tokenizer_(std::move(tokenizer)), eos_id_(eos_id), pad_id_(pad_id) {}
  text::Tokenizer tokenizer_;
  int64_t eos_id_;
  int64_t pad_id_;
};

}  // namespace qtrain::engine::data
