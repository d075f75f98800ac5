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
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    return base_->decode(ids, skip_special_tokens);
  }
  int64_t eos_id() const override { return eos_id_.value_or(base_->eos_id()); }
  int64_t pad_id() const override { return pad_id_.value_or(base_->pad_id()); }
  std::optional<int64_t> id_of(std::string_view token) const override { return base_->id_of(token); }
  std::string bos_token() const override { return tokens_.bos_token.empty() ? base_->bos_token() : tokens_.bos_token; }
  std::string eos_token() const override { return tokens_.eos_token.empty() ? base_->eos_token() : tokens_.eos_token; }
  std::optional<std::string> chat_template() const override { return base_->chat_template(); }
  int64_t vocab_size() const override { return base_->vocab_size(); }

 private:
  std::unique_ptr<TextTokenizer> base_;
  config::SpecialTokens tokens_;
  std::optional<int64_t> eos_id_;
  std::optional<int64_t> pad_id_;
};

}  // namespace

std::unique_ptr<TextTokenizer> with_run_tokens(std::unique_ptr<TextTokenizer> tokenizer,
                                               const config::SpecialTokens& special,
                                               const std::vector<std::string>& tokens,
                                               const std::string& tokenizer_file,
                                               std::vector<NewToken>* added) {
  if (special.empty() && tokens.empty()) return tokenizer;
  std::vector<std::pair<std::string, const std::string*>> wanted = {{"special_tokens.bos_token", &special.bos_token},
                                                                    {"special_tokens.eos_token", &special.eos_token},
                                                                    {"special_tokens.pad_token", &special.pad_token},
                                                                    {"special_tokens.unk_token", &special.unk_token}};
  for (const std::string& token : tokens) wanted.emplace_back("tokens", &token);
  for (const auto& [key, token] : wanted) {
    if (token->empty()) continue;
    const bool had = tokenizer->id_of(*token).has_value();
    const auto id = tokenizer->add_token(*token, key != "tokens");
    TORCH_CHECK(had || id.has_value(),
                key.starts_with("special") ? special.place + ": " : std::string(),
                key,
                ": '",
                *token,
                "' is not a token of ",
                tokenizer_file,
                ", which cannot add tokens; give the model a tokenizer.json (a Hugging Face tokenizer can), or pick "
                "a token it has");
    if (!had && added) added->push_back({*token, *id, key});
  }
  return special.empty() ? std::move(tokenizer)
                         : std::make_unique<SpecialTokensTokenizer>(std::move(tokenizer), special);
}

}  // namespace qtrain::engine::data
