// See tokenize_lines.h.
#include "engine/text/tokenize_lines.h"

#include <istream>
#include <ostream>
#include <string>

#include "engine/text/jinja_error.h"
#include "engine/text/json_depth.h"

namespace qtrain::engine::text {
namespace {

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string json = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) json += ", ";
    json += std::to_string(ids[i]);
  }
  return json + "]\n";
}

std::string line_place(size_t n) {
  return "line " + std::to_string(n) + " of the input: ";
}

// One input line of tokenize_chat_lines as the template's input.
ChatTemplateInput read_conversation(const std::string& line, size_t n) {
  const std::string shape =
      "each line is one conversation: [{\"role\": \"user\", \"content\": \"...\"}, ...] or {\"messages\": [...], "
      "\"tools\": [...]}";
  if (auto problem = json_depth_problem(line); !problem.empty()) throw TokenizerError(line_place(n) + problem);
  nlohmann::ordered_json row;
  try {
    row = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw TokenizerError(line_place(n) + "not JSON (" + e.what() + "); " + shape);
  }
  ChatTemplateInput input;
  if (row.is_object()) {
    const auto messages = row.find("messages");
    if (messages == row.end()) throw TokenizerError(line_place(n) + "the object has no \"messages\"; " + shape);
    input.messages = *messages;
    if (const auto tools = row.find("tools"); tools != row.end()) input.tools = *tools;
  } else {
    input.messages = row;
  }
  if (!input.messages.is_array()) {
    throw TokenizerError(line_place(n) + "the messages are " + std::string(input.messages.type_name()) +
                         ", not a list; " + shape);
  }
  return input;
}

}  // namespace

size_t tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, bool add_special_tokens) {
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    try {
      out << ids_json(tokenizer.encode_ids(line, add_special_tokens));
    } catch (const TokenizerError& e) {
      throw TokenizerError(line_place(n) + e.what());
    }
  }
  return n;
}

size_t tokenize_chat_lines(const Tokenizer& tokenizer,
                           const ChatTemplate& chat_template,
                           std::istream& in,
                           std::ostream& out,
                           bool add_generation_prompt) {
  // transformers passes the tokenizer's special tokens to the template; those it does not set
  // stay undefined.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  const TokenizerConfig& config = tokenizer.config();
  for (const auto& [name, token] : {std::pair{"bos_token", &config.bos_token},
                                    std::pair{"eos_token", &config.eos_token},
                                    std::pair{"unk_token", &config.unk_token},
                                    std::pair{"pad_token", &config.pad_token}}) {
    if (token->has_value()) variables[name] = **token;
  }
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    ChatTemplateInput input = read_conversation(line, n);
    input.add_generation_prompt = add_generation_prompt;
    input.variables = variables;
    std::string text;
    try {
      text = chat_template.render(input).text;
    } catch (const TemplateError& e) {
      throw TemplateError(line_place(n) + e.what());
    }
    try {
      out << ids_json(tokenizer.encode_ids(text, /*add_special_tokens=*/false));
    } catch (const TokenizerError& e) {
      throw TokenizerError(line_place(n) + e.what());
    }
  }
  return n;
}

}  // namespace qtrain::engine::text
