// See tokenize_lines.h.
#include "engine/text/tokenize_lines.h"

#include <istream>
#include <ostream>
#include <string>

namespace qtrain::engine::text {

size_t tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, bool add_special_tokens) {
  std::string line;
  std::string json;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    try {
      const auto ids = tokenizer.encode_ids(line, add_special_tokens);
      json.assign("[");
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) json += ", ";
        json += std::to_string(ids[i]);
      }
      json += "]\n";
    } catch (const TokenizerError& e) {
      throw TokenizerError("line " + std::to_string(n) + " of the input: " + e.what());
    }
    out << json;
  }
  return n;
}

}  // namespace qtrain::engine::text
