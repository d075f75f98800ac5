// `qtrain tokenize`'s work: each line of a text stream through a tokenizer, one JSON array of
// ids per line.
#pragma once

#include <iosfwd>

#include "engine/text/tokenizer.h"

namespace qtrain::engine::text {

// Reads `in` line by line (the '\n' is not part of the line; a '\r' before it is) and writes
// one JSON array of ids per line to `out`, e.g. `[128000, 9906, 1917]`. Returns the lines read.
size_t tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, bool add_special_tokens);

}  // namespace qtrain::engine::text
