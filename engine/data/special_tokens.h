// axolotl's `special_tokens:` and `tokens:` on a loaded tokenizer: tokens it lacks are added, as
// transformers' add_special_tokens and add_tokens do, and the special ones take over the roles of
// BOS, EOS, PAD and UNK.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
// the tokenizer lacks is added first (Note [New tokens]).

// Note [New tokens]
// axolotl's load_tokenizer adds the special_tokens entries in the order bos_token, eos_token,
// pad_token, unk_token (add_special_tokens), then the `tokens` list (add_tokens), each as
// AddedToken(token, lstrip=False, rstrip=False, normalized=False): the text is cut at them before
// the normalizer and the model see it. A token that is not in the vocabulary gets the next id
// (HF's AddedVocabulary rule, Note [Added token ids] in engine/text/added_tokens.cpp); one of the
// model's own becomes an added token with its id; an added token stays as it is. The model
// loader then grows the embeddings to len(tokenizer) where they have fewer rows (Note [Resized
// embeddings] in engine/model/resize_embeddings.h); a model whose embeddings have spare rows
// (Qwen's 151,936 for 151,665 tokens) gives the new ids rows it never trained. Either way a new
// token means nothing until its rows are trained, so axolotl refuses a new special token other
// than pad_token on an adapter run unless lora_modules_to_save holds embed_tokens and lm_head;
// qtrain refuses every new token but pad_token that way (engine/train/run_vocabulary.h). The
// built-in byte tokenizer cannot add tokens: a token it lacks is an error.

// A token the run added: its text, its id and the key that asked for it ("tokens" or
// "special_tokens.eos_token").
struct NewToken {
  std::string content;
  int64_t id = 0;
  std::string key;
};

// `tokenizer` with `special`'s and `tokens`' tokens added where it lacks them (Note [New
// tokens]) and the roles of `special` taken over; `tokenizer` itself when both are empty. The
// tokens added go to `added` (when not null). `tokenizer_file` names the vocabulary in messages.
std::unique_ptr<TextTokenizer> with_run_tokens(std::unique_ptr<TextTokenizer> tokenizer,
                                               const config::SpecialTokens& special,
                                               const std::vector<std::string>& tokens,
                                               const std::string& tokenizer_file,
                                               std::vector<NewToken>* added);

}  // namespace qtrain::engine::data
