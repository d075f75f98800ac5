// See hf_tokenizer.h.
#include "engine/data/hf_tokenizer.h"

#include <c10/util/Exception.h>

namespace qtrain::engine::data {

HfTokenizer HfTokenizer::load(const std::filesystem::path& dir) {
  auto tokenizer = text::Tokenizer::load(dir);
  const auto& config = tokenizer.config();
  const auto config_file = (dir / "tokenizer_config.json").string();
  TORCH_CHECK(config.eos_token.has_value(),
              config_file,
              ": no \"eos_token\"; the dataset formats end every sample with it. Add e.g. "
              "\"eos_token\": \"</s>\" (the model's end-of-sequence token)");
  const auto eos = tokenizer.token_to_id(*config.eos_token);
  TORCH_CHECK(eos.has_value(),
              config_file,
              ": eos_token \"",
              *config.eos_token,
              "\" is not a token of tokenizer.json; set it to the model's end-of-sequence token");
  std::optional<int32_t> pad;
  if (config.pad_token) pad = tokenizer.token_to_id(*config.pad_token);
  return HfTokenizer(std::move(tokenizer), *eos, pad.value_or(*eos));
}

TokenizedText HfTokenizer::tokenize(std::string_view text, bool add_special_tokens) const {
  const auto encoding = tokenizer_.encode(text, add_special_tokens);
  TokenizedText out;
  out.ids.assign(encoding.ids.begin(), encoding.ids.end());
  out.spans.reserve(encoding.offsets.size());
  for (const auto& span : encoding.offsets) out.spans.emplace_back(span.begin, span.end);
  return out;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return tokenizer_.decode(std::vector<int32_t>(ids.begin(), ids.end()), skip_special_tokens);
}

std::optional<int64_t> HfTokenizer::id_of(std::string_view token) const {
  const auto id = tokenizer_.token_to_id(token);
  return id ? std::optional<int64_t>(*id) : std::nullopt;
}

}  // namespace qtrain::engine::data
