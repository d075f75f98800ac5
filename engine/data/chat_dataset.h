// `type: chat_template` datasets: each row holds a conversation (axolotl's layout,
// {"messages": [{"role": ..., "content": ...}, ...]}), rendered with the model's chat template and
// masked so that only the turns of `roles_to_train`, or those a row's training flags and details
// mark (and their end-of-turn tokens), are trained. See Note [Chat labels from character spans].
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/config/run_config.h"
#include "engine/data/pretokenized.h"
#include "engine/data/row_map.h"
#include "engine/data/text_tokenizer.h"

namespace qtrain::engine::data {

// Every row of `d.path` as a sample (before truncation and dropping; see load_dataset). Errors
// name the file, line, field and fix.
// train_on_inputs trains every turn, as axolotl's. A conversation of more than `max_tokens`
// tokens may come back cut after max_tokens + 1 of them (See Note [Long chat rows]).
std::vector<Sample> read_chat_template(const config::DatasetConfig& d,
                                       const TextTokenizer& tokenizer,
                                       bool train_on_inputs,
                                       size_t max_tokens,
                                       const RowMapOptions& rows = {});

}  // namespace qtrain::engine::data
