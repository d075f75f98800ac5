// `qtrain tokenize`'s work: each line of a text stream through a tokenizer, one JSON array of
// ids per line; with --chat, each line a conversation rendered with a chat template first.
#pragma once

#include <iosfwd>

#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

namespace qtrain::engine::text {

// Reads `in` line by line (the '\n' is not part of the line; a '\r' before it is) and writes
// one JSON array of ids per line to `out`, e.g. `[128000, 9906, 1917]`. Returns the lines read.
size_t tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, bool add_special_tokens);

// Each line of `in` is one conversation: a JSON list of messages, or an object with "messages"
// and optionally "tools". Renders it with `chat_template` (which sees the tokenizer's bos_token,
// eos_token, pad_token and unk_token that tokenizer_config.json sets) and tokenizes the text
// without special tokens, as transformers' apply_chat_template(tokenize=True) does; writes one
// JSON array of ids per line. A line that is not such JSON, or that the template refuses, is an
// error that names the line. Returns the lines read.
size_t tokenize_chat_lines(const Tokenizer& tokenizer,
                           const ChatTemplate& chat_template,
                           std::istream& in,
                           std::ostream& out,
                           bool add_generation_prompt);

}  // namespace qtrain::engine::text
