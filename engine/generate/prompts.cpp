// See prompts.h.
#include "engine/generate/prompts.h"

#include <algorithm>
#include <fstream>

#include <c10/util/Exception.h>

#include "engine/config/chat_template_choice.h"
#include "engine/text/jinja_error.h"

namespace qtrain::engine::generate {

namespace fs = std::filesystem;

std::vector<Prompt> read_prompts(std::istream& in, const std::string& source, bool plain) {
  std::vector<Prompt> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = source + ":" + std::to_string(number);
    if (plain) {
      out.push_back({line, nullptr});
      continue;
    }
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TORCH_CHECK(false, where, ": not JSON (", e.what(), "); write one {\"prompt\": \"...\"} per line");
    }
    Prompt p;
    if (j.is_string()) {
      p.text = j.get<std::string>();
    } else if (j.is_object() && (j.contains("messages") || j.contains("conversations"))) {
      p.messages = j.contains("messages") ? j["messages"] : j["conversations"];
      TORCH_CHECK(p.messages.is_array() && !p.messages.empty(),
                  where,
                  ": \"messages\" must be a non-empty list of {\"role\": ..., \"content\": ...}");
    } else if (j.is_object() && (j.contains("prompt") || j.contains("text"))) {
      const auto& text = j.contains("prompt") ? j["prompt"] : j["text"];
      TORCH_CHECK(text.is_string(), where, ": \"prompt\" must be a string, found ", text.type_name());
      p.text = text.get<std::string>();
    } else {
      TORCH_CHECK(false,
                  where,
                  ": expected {\"prompt\": \"...\"}, {\"messages\": [...]} or a JSON string, found ",
                  line.substr(0, 80));
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<std::string> chat_template_source(const config::RunConfig& c,
                                                const std::string& choice,
                                                const fs::path& config_dir,
                                                const data::TextTokenizer& tokenizer) {
  config::DatasetConfig d;
  if (!choice.empty()) {
    // A path on the command line is the shell's: relative to the working folder.
    const bool file = fs::is_regular_file(choice);
    const auto as_given = [](const fs::path& p) { return p; };
    config::apply_chat_template(file ? "jinja" : choice, file ? choice : "", as_given, "--chat-template", choice, d);
    TORCH_CHECK(
        file || choice == "tokenizer_default" || !d.chat_template_source.empty() || !d.chat_template_fallback.empty(),
        "--chat-template ",
        choice,
        " is neither a .jinja file nor a template name; ",
        config::chat_template_choice_help());
  } else {
    const auto from_config = [&](const fs::path& p) { return p.is_absolute() ? p : config_dir / p; };
    config::apply_chat_template(
        c.chat_template, c.chat_template_jinja, from_config, "chat_template", "chat_template_jinja", d);
  }
  if (!d.chat_template_source.empty()) return d.chat_template_source;
  if (auto own = tokenizer.chat_template()) return own;
  if (!d.chat_template_fallback.empty()) return d.chat_template_fallback;
  return std::nullopt;
}

PromptEncoder::PromptEncoder(const data::TextTokenizer& tokenizer,
                             const std::optional<std::string>& chat_template,
                             bool chat,
                             std::string system)
    : tokenizer_(tokenizer), chat_(chat), system_(std::move(system)) {
  if (chat_template) template_.emplace(*chat_template);
}

std::string PromptEncoder::render(const nlohmann::ordered_json& messages) const {
  TORCH_CHECK(template_.has_value(),
              "a chat prompt needs a chat template, and the model's tokenizer_config.json has none; pass "
              "--chat-template NAME (chatml, llama3, ...) or a .jinja file, or set chat_template in the config");
  text::ChatTemplateInput input;
  input.messages = messages;
  input.add_generation_prompt = true;
  input.variables["bos_token"] = tokenizer_.bos_token();
  input.variables["eos_token"] = tokenizer_.eos_token();
  try {
    return template_->render(input).text;
  } catch (const text::TemplateError& e) {
    TORCH_CHECK(false, "the chat template refused the conversation: ", e.what());
  }
}

std::vector<int64_t> PromptEncoder::encode(const Prompt& prompt) const {
  if (prompt.is_chat()) return tokenizer_.tokenize(render(prompt.messages), false).ids;
  if (!chat_) return tokenizer_.tokenize(prompt.text, true).ids;
  auto messages = nlohmann::ordered_json::array();
  if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
  messages.push_back({{"role", "user"}, {"content", prompt.text}});
  return tokenizer_.tokenize(render(messages), false).ids;
}

std::vector<int64_t> stop_ids(const config::RunConfig& c, const data::TextTokenizer& tokenizer) {
  std::vector<int64_t> ids = {tokenizer.eos_id()};
  auto add = [&](int64_t id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (const auto& name : c.eot_tokens) {
    const auto id = tokenizer.id_of(name);
    TORCH_CHECK(id.has_value(), "eot_tokens: '", name, "' is not a token of the model's tokenizer");
    add(*id);
  }
  const auto file = c.base_model / "generation_config.json";
  if (fs::exists(file)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(std::ifstream(file));
    } catch (const nlohmann::json::exception& e) {
      TORCH_CHECK(false, file.string(), ": not valid JSON (", e.what(), ")");
    }
    const auto eos = j.value("eos_token_id", nlohmann::json());
    if (eos.is_number_integer()) add(eos.get<int64_t>());
    if (eos.is_array()) {
      for (const auto& id : eos) {
        if (id.is_number_integer()) add(id.get<int64_t>());
      }
    }
  }
  return ids;
}

}  // namespace qtrain::engine::generate
