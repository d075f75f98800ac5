// See run_vocabulary.h.
#include "engine/train/run_vocabulary.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "engine/model/resize_embeddings.h"
#include "engine/model/saved_modules.h"
#include "engine/train/run_plan.h"
#include "engine/train/training_data.h"

namespace qtrain::engine::train {

int64_t embedding_rows(const config::RunConfig& c, int64_t model_rows, int64_t tokenizer_size) {
  const int64_t wanted = c.resize_token_embeddings_to_32x ? (tokenizer_size + 31) / 32 * 32 : tokenizer_size;
  return wanted > model_rows || (wanted < model_rows && c.shrink_embeddings) ? wanted : model_rows;
}

model::ModelConfig run_model_config(const config::RunConfig& c) {
  auto model = read_model_config(c.base_model);
  // As fit_run_vocabulary sizes the loaded model.
  if (const auto tokenizer = run_tokenizer(c, model.vocab_size)) {
    model.vocab_size = embedding_rows(c, model.vocab_size, tokenizer->vocab_size());
  }
  return model;
}

std::string fit_embeddings(model::CausalLM& lm,
                           const config::RunConfig& c,
                           const data::TextTokenizer* tokenizer,
                           const std::vector<data::NewToken>& added) {
  if (tokenizer == nullptr) return "";
  std::string line;
  if (!added.empty()) {
    std::vector<std::string> shown;
    for (const auto& t : added) shown.push_back("'" + t.content + "' " + std::to_string(t.id));
    line = c10::str("vocabulary: ",
                    added.size(),
                    added.size() == 1 ? " token" : " tokens",
                    " added (",
                    c10::Join(", ", shown),
                    "), ",
                    tokenizer->vocab_size(),
                    " in all");
  }
  const int64_t before = lm.config().vocab_size;
  const int64_t rows = embedding_rows(c, before, tokenizer->vocab_size());
  if (rows != before) {
    model::resize_embeddings(lm, rows, c.mean_resizing_embeddings, static_cast<uint64_t>(c.seed));
    line += c10::str(line.empty() ? "vocabulary: " : "; ",
                     "embeddings ",
                     rows > before ? "grown" : "cut",
                     " from ",
                     before,
                     " to ",
                     rows,
                     " rows");
    if (rows > before) {
      line += c.mean_resizing_embeddings
                  ? " (new rows from the old rows' mean and covariance, mean_resizing_embeddings: true)"
                  : c10::str(" (new rows normal(0, ", lm.config().initializer_range, "), as axolotl's default)");
    }
  } else if (!added.empty()) {
    line += c10::str("; the embeddings' ", rows, " rows hold them already");
  }
  for (const auto& t : added) {
    TORCH_CHECK(t.id < rows,
                "the tokenizer gave '",
                t.content,
                "' the id ",
                t.id,
                ", beyond the embeddings' ",
                rows,
                " rows (its ids have gaps); remove the token");
  }
  return line;
}

RunVocabulary fit_run_vocabulary(model::CausalLM& lm, const config::RunConfig& c) {
  RunVocabulary v;
  v.tokenizer = run_tokenizer(c, lm.config().vocab_size, &v.added);
  v.log_line = fit_embeddings(lm, c, v.tokenizer.get(), v.added);
  return v;
}

void check_new_tokens_trained(const model::CausalLM& lm, const std::vector<data::NewToken>& added) {
  if (lm.trained_embed_tokens().defined() && lm.trained_lm_head().defined()) return;
  for (const auto& t : added) {
    if (t.key == "special_tokens.pad_token") continue;  // padding is never trained, as in axolotl
    TORCH_CHECK(false,
                t.key,
                ": '",
                t.content,
                "' is a new token (id ",
                t.id,
                "), and its embedding and output rows start random: they mean something only when trained. Add "
                "lora_modules_to_save: [embed_tokens, lm_head] (axolotl requires the same) or unfreeze them with "
                "unfrozen_parameters; today the run trains ",
                lm.trained_embed_tokens().defined() ? model::embed_tokens_module(lm.config()) + " but not lm_head"
                : lm.trained_lm_head().defined()    ? std::string("lm_head but not the embeddings")
                                                    : std::string("neither"));
  }
}

}  // namespace qtrain::engine::train
