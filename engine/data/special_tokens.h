// axolotl's `special_tokens:` on a loaded tokenizer: tokens it already has take over the roles of
// BOS, EOS, PAD and UNK, as transformers' add_special_tokens does for a token in the vocabulary.
#pragma once

#include <memory>
#include <string>

#include "engine/config/run_config.h"
#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

// Note [Special tokens]
// axolotl calls tokenizer.add_special_tokens({role: token}) for each entry of special_tokens
// (src/axolotl/loaders/tokenizer.py). For a token the tokenizer has, that only changes the role:
// eos_token is then the EOS that completion and alpaca append, that train_on_eos trains and that
// chat templates read as eos_token (and the default eot_tokens); pad_token is the padding id;
// bos_token is what templates read as bos_token (the BOS the post-processor adds comes from
// tokenizer.json and stays); unk_token changes nothing the tokenizer.json pipeline does. A token
// the tokenizer lacks would be added and the embeddings resized, which qtrain does not do: that
// is an error naming the token.

// `tokenizer` with the roles of `tokens` replaced; `tokenizer` itself when `tokens` is empty.
// `tokenizer_file` names the vocabulary in messages.
std::unique_ptr<TextTokenizer> with_special_tokens(std::unique_ptr<TextTokenizer> tokenizer,
                                                   const config::SpecialTokens& tokens,
                                                   const std::string& tokenizer_file);

}  // namespace qtrain::engine::data
