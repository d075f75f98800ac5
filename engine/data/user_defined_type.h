// axolotl's user-defined preference type: a dataset's `type:` written as a map of row keys and
// format strings, which turns each row into TRL's text row. See Note [User-defined type].
//
// Note [User-defined type]
// As axolotl's prompt_strategies/dpo/user_defined.py and kto/user_defined.py write a row (the
// `type:` map's keys, config::UserDefinedType):
//     prompt     prompt_format (default "{prompt}") with {prompt} the text of field_prompt and,
//                where the format has {system} and the row a non-empty field_system, {system}
//     chosen     chosen_format (default "{chosen}") with {chosen} the text of field_chosen
//     rejected   rejected_format (default "{rejected}") with {rejected} the text of field_rejected
// and for rl: kto
//     completion completion_format (default "{completion}") with {completion} the text of
//                field_completion
//     label      field_label's value, as it is.
// The formats are Python's str.format: {name} is replaced, {{ and }} are braces. The row keeps
// no other field (TRL reads only these). With the fields axolotl's defaults name (prompt, system,
// chosen, rejected) and formats of those placeholders, this is axolotl's row. Elsewhere axolotl's
// code fails or reads other fields, and qtrain reads what the keys name: axolotl looks for
// "{<field_system>}" in the format but fills only {system}; without a system it fills {prompt}
// from the "prompt" field whatever field_prompt says; its default formats name the field
// (`{instruction}` for field_prompt: instruction) but it fills only {prompt}, {system}, {chosen}
// and {rejected}; its KTO code reads no completion_format and fills the completion only through
// {chosen}. A format that names another placeholder, or {system} where the row has none, is
// refused with the row's place.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"

namespace qtrain::engine::data {

// TRL's text row for `row` of a user_defined.default dataset `u`: {"prompt", "chosen",
// "rejected"}, or with `kto` {"prompt", "completion", "label"}. Errors name `where`, the key and
// the fix.
nlohmann::ordered_json user_defined_row(const config::UserDefinedType& u,
                                        const nlohmann::ordered_json& row,
                                        bool kto,
                                        const std::string& where);

}  // namespace qtrain::engine::data
