// See special_tokens.h.
#include "engine/data/special_tokens.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

namespace qtrain::engine::data {
namespace {

// See Note [Special tokens].
class SpecialTokensTokenizer : public TextTokenizer {
 public:
  SpecialTokensTokenizer(std::unique_ptr<TextTokenizer> base, const config::SpecialTokens& tokens)
      : base_(std::move(base)), tokens_(tokens) {
    if (!tokens_.eos_token.empty()) eos_id_ = *base_->id_of(tokens_.eos_token);
    if (!tokens_.pad_token.empty()) pad_id_ = *base_->id_of(tokens_.pad_token);
  }

  TokenizedText tokenize(std::string_view text, bool add_special_tokens) const override {
    return base_->tokenize(text, add_special_tokens);
  }
  int64_t eos_id() const override { return eos_id_.value_or(base_->eos_id()); }
  int64_t pad_id() const override { return pad_id_.value_or(base_->pad_id()); }
  std::optional<int64_t> id_of(std::string_view token) const override { return base_->id_of(token); }
  std::string bos_token() const override { return tokens_.bos_token.empty() ? base_->bos_token() : tokens_.bos_token; }
  std::string eos_token() const override { return tokens_.eos_token.empty() ? base_->eos_token() : tokens_.eos_token; }
  std::optional<std::string> chat_template() const override { return base_->chat_template(); }

 private:
  std::unique_ptr<TextTokenizer> base_;
  config::SpecialTokens tokens_;
  std::optional<int64_t> eos_id_;
  std::optional<int64_t> pad_id_;
};

}  // namespace

std::unique_ptr<TextTokenizer> with_special_tokens(std::unique_ptr<TextTokenizer> tokenizer,
                                                   const config::SpecialTokens& tokens,
                                                   const std::string& tokenizer_file) {
  if (tokens.empty()) return tokenizer;
  const std::pair<const char*, const std::string*> roles[] = {{"bos_token", &tokens.bos_token},
                                                              {"eos_token", &tokens.eos_token},
                                                              {"pad_token", &tokens.pad_token},
                                                              {"unk_token", &tokens.unk_token}};
  for (const auto& [role, token] : roles) {
    TORCH_CHECK(token->empty() || tokenizer->id_of(*token).has_value(),
                tokens.place,
                ": special_tokens.",
                role,
                ": '",
                *token,
                "' is not a token of ",
                tokenizer_file,
                "; axolotl would add it and resize the embeddings, which qtrain does not do (nor `tokens:`). "
                "Pick a token the tokenizer has (its tokenizer_config.json lists the special ones), or remove the "
                "entry");
  }
  return std::make_unique<SpecialTokensTokenizer>(std::move(tokenizer), tokens);
}

}  // namespace qtrain::engine::data
