// The run's tokenizer written into a model folder: what transformers' tokenizer.save_pretrained
// writes after axolotl added the config's special_tokens and tokens (Note [New tokens] in
// special_tokens.h), so that a merged folder's tokenizer gives the ids its embeddings were trained
// with.
#pragma once

#include <filesystem>

#include "engine/config/run_config.h"
#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

// Rewrites the tokenizer files in `folder` (copies of the base's) for `c`'s special_tokens and
// tokens: each one that tokenizer.json does not list as an added token is appended to its
// "added_tokens" with the id `run_tokenizer` gave it (normalized false, special for
// special_tokens' entries, as axolotl adds them); tokenizer_config.json's "added_tokens_decoder"
// then lists every added token, as save_pretrained writes it; and each
// special_tokens role (bos_token, ...) is set in tokenizer_config.json and special_tokens_map.json
// where the folder has them. A folder without tokenizer.json (the built-in byte tokenizer) is left
// as it is. Returns whether a file changed.
bool write_run_tokens(const std::filesystem::path& folder,
                      const config::RunConfig& c,
                      const TextTokenizer& run_tokenizer);

}  // namespace qtrain::engine::data
