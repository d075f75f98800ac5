// The run's vocabulary on the model: embeddings resized to the tokenizer the run built (axolotl's
// `tokens:` and new `special_tokens`, Note [New tokens] in engine/data/special_tokens.h), and the
// check that the new tokens' rows are trained. Training, evaluation and merging all size the
// model this way, so an adapter trained with new tokens fits the model they load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/data/special_tokens.h"
#include "engine/data/text_tokenizer.h"
#include "engine/model/causal_lm.h"

namespace qtrain::engine::train {

// The rows the embeddings get, as axolotl's model loader decides: len(tokenizer) (rounded up to a
// multiple of 32 with resize_token_embeddings_to_32x) where the model has fewer rows, or more
// rows with shrink_embeddings; else the model's own.
int64_t embedding_rows(const config::RunConfig& c, int64_t model_rows, int64_t tokenizer_size);

// base_model's config.json with vocab_size the rows the run gives the embeddings
// (embedding_rows, once the config's special_tokens and tokens are added to the tokenizer): what
// the memory plan counts, before any weight is loaded.
model::ModelConfig run_model_config(const config::RunConfig& c);

// Resizes `lm`'s embeddings to embedding_rows for `tokenizer` (none: unchanged), drawing new rows
// as transformers does from the run's seed (Note [Resized embeddings] in
// engine/model/resize_embeddings.h). Returns the log line about `added` and the resize, or "" when
// neither happened. Before any adapter is attached.
std::string fit_embeddings(model::CausalLM& lm,
                           const config::RunConfig& c,
                           const data::TextTokenizer* tokenizer,
                           const std::vector<data::NewToken>& added);

// The run's tokenizer (run_tokenizer: base_model's with the config's special_tokens and tokens;
// null when the data needs none), the tokens it added, and `lm` fitted to it by fit_embeddings:
// what train, eval and merge all do before they attach an adapter. `log_line` is fit_embeddings'.
struct RunVocabulary {
  std::unique_ptr<data::TextTokenizer> tokenizer;
  std::vector<data::NewToken> added;
  std::string log_line;
};
RunVocabulary fit_run_vocabulary(model::CausalLM& lm, const config::RunConfig& c);

// Refuses a training run that adds a token (a new pad_token aside) without training the
// embeddings and the head in full (lora_modules_to_save or unfrozen_parameters): its rows would
// stay random. See Note [New tokens].
void check_new_tokens_trained(const model::CausalLM& lm, const std::vector<data::NewToken>& added);

}  // namespace qtrain::engine::train
