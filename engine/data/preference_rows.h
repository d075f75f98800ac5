// Preference rows as text or conversations, tokenized into pairs as TRL 1.16's DPOTrainer
// prepares them. See Note [Preference rows].
//
// Note [Preference rows]
// A row holds "chosen" and "rejected", and "prompt" or not; each is a string (standard) or a list
// of {"role", "content"} messages (conversational). TRL's DPOTrainer._prepare_dataset, step by
// step:
// 1. Without "prompt", the prompt is the longest common prefix of chosen and rejected (TRL's
//    extract_prompt): of their messages, or of their text by characters, one space before the
//    first difference staying with the completions. Where one is a prefix of the other, the
//    prefix's last message or character stays with the completions too (the index TRL's loop
//    ends on).
// 2. Plain-text completions get the tokenizer's EOS text appended where they do not end with it.
// 3. The prompt, prompt + chosen and prompt + rejected are tokenized: text as tokenizer(text)
//    (with the family's special tokens, a BOS for Llama); a conversation through the chat
//    template, the prompt with add_generation_prompt, each whole conversation without, the
//    rendered text tokenized without special tokens (apply_chat_template(tokenize=True)).
// 4. The completions start where the tokenized prompt and prompt + completion first differ (the
//    shorter of the two common prefixes): a template that renders the prompt alone differently,
//    or tokens that merge across the boundary, move the split, as in TRL.
// Rows of pre-tokenized ids ("prompt_ids", "chosen_ids", "rejected_ids") are TRL's output and
// read as they are (preference_pairs.h).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/data/preference_pairs.h"
#include "engine/data/text_tokenizer.h"
#include "engine/text/chat_template.h"

namespace qtrain::engine::data {

// Step 1 alone: `row` with its "prompt" extracted from "chosen" and "rejected" where it has none
// (or null), as TRL's extract_prompt does; a row with a prompt as it is. Chosen and rejected of
// other types are left for tokenize_preference_row to name.
nlohmann::ordered_json with_prompt(const nlohmann::ordered_json& row, const std::string& where);

// Whether `row` holds a conversation: a "prompt", "chosen" or "rejected" that is a list of
// messages with roles (TRL's is_conversational).
bool is_conversational_row(const nlohmann::ordered_json& row);

// What `chat_template` renders for `messages` (with the generation prompt where asked), the
// tokenizer's bos_token and eos_token given to it; a refusal names `where`.
std::string render_chat(const text::ChatTemplate& chat_template,
                        const nlohmann::ordered_json& messages,
                        bool generation_prompt,
                        const std::string& bos_token,
                        const std::string& eos_token,
                        const std::string& where);

// The pair a row of text or a conversation makes (Note [Preference rows]). `chat_template` is
// needed for conversations (null: such a row is refused with the fix); errors name `where`.
PreferencePair tokenize_preference_row(const nlohmann::ordered_json& row,
                                       const TextTokenizer& tokenizer,
                                       const text::ChatTemplate* chat_template,
                                       const std::string& where);

}  // namespace qtrain::engine::data
