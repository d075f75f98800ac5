// axolotl's preference dataset types (`type: chatml.intel`, `llama3.default`,
// `chat_template.default`, ...): each turns a row of its own layout into TRL's text row
// {"prompt", "chosen", "rejected"}, which preference_rows.h then tokenizes as TRL's DPOTrainer
// does, as axolotl hands its rows to TRL. See Note [Preference types].
//
// Note [Preference types]
// As axolotl's prompt_strategies/dpo/{chatml,llama3,chat_template}.py write them:
// - chatml.* and llama3.*: the prompt is the system turn (where the row has a non-empty
//   "system") and the user turn written in the family's markup, ending with the assistant's
//   header; each completion is its text followed by the end of turn (<|im_end|>, <|eot_id|>).
//   The user text comes from "prompt" (prompt_pairs, ultra), "input" (icr), "question" (intel),
//   the first of prompt/input/question/instruction (chatml.argilla, llama3.default), or the first
//   message of "chosen" (argilla_chat); the completions from "chosen"/"rejected" (or
//   chosen_response/rejected_response for argilla and default), or their second message's content
//   (ultra, argilla_chat). argilla_chat writes no system turn.
// - chat_template.default: field_messages (a list, or a string as one user message) rendered with
//   the chat template and its generation prompt is the prompt; each completion (field_chosen,
//   field_rejected: a string as an assistant message, a message, or a list whose last message
//   counts) is rendered after a dummy user message, taken from where its content starts, and
//   stripped of trailing whitespace. chat_template.argilla_chat: the prompt is every message of
//   field_chosen but the last, the completions their lists' last messages. Roles pass through
//   `roles` (and the built-in human -> user, gpt -> assistant), message keys through
//   message_property_mappings.
// With rl: kto the chatml.* and llama3.* types are axolotl's prompt_strategies/kto ones, which
// write KTO's text row {"prompt", "completion", "label"}: the prompt as above with the user text
// from "instruction" (argilla), "question" (intel) or "prompt" (prompt_pairs, ultra), the
// completion the row's "completion" text followed by the end of turn; argilla_chat reads the
// conversation in "completion": chatml's prompt is the user turn of its first message and its
// completion the second message; llama3's prompt is every message before the last in its role,
// and its completion the last. The label passes through. (llama3.argilla is a KTO type only; icr and default are
// DPO's.) The user-defined type (`type:` as a map) is both: Note [User-defined type].
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"
#include "engine/text/chat_template.h"

namespace qtrain::engine::data {

// Whether `type` is one of config::preference_dataset_types().
bool is_preference_type(std::string_view type);

// TRL's text row for `row` of dataset `d` (whose type is a preference type). `chat_template` is
// needed by the chat_template.* types; `bos_token`/`eos_token` are what the template reads.
// Errors name `where`, the field and the fix.
nlohmann::ordered_json preference_type_row(const config::DatasetConfig& d,
                                           const nlohmann::ordered_json& row,
                                           const text::ChatTemplate* chat_template,
                                           const std::string& bos_token,
                                           const std::string& eos_token,
                                           const std::string& where);

// Whether `type` is one of axolotl's KTO types (chatml.* and llama3.* with argilla, argilla_chat,
// intel, prompt_pairs or ultra, and user_defined.default).
bool is_kto_type(std::string_view type);

// KTO's text row for `row` of dataset `d` (a chatml.* or llama3.* type of axolotl's KTO
// strategies; see the Note). Errors name `where`, the field and the fix.
nlohmann::ordered_json kto_type_row(const config::DatasetConfig& d,
                                    const nlohmann::ordered_json& row,
                                    const std::string& where);

}  // namespace qtrain::engine::data
