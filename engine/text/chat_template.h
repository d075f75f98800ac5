// Chat templates: the Jinja text a model ships (tokenizer_config.json "chat_template", or a
// chat_template.jinja) rendered the way transformers' apply_chat_template(tokenize=False)
// renders it, byte for byte, with the spans of {% generation %} blocks.
//
// The engine is an in-project Jinja subset (engine/text/jinja_*); docs/DATA.md, "Chat
// templates", lists what it supports. Rendering needs no Python.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/text/jinja_ast.h"
#include "engine/text/jinja_render.h"

namespace qtrain::engine::text {

struct ChatTemplateInput {
  // [{"role": ..., "content": string | [{"type": "text", "text": ...}, ...], ...}, ...]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // JSON-schema tool definitions, or null (the template then sees tools=None).
  nlohmann::ordered_json tools = nullptr;
  // Retrieval documents, or null (documents=None).
  nlohmann::ordered_json documents = nullptr;
  bool add_generation_prompt = false;
  // More template variables: bos_token, eos_token, enable_thinking, ... (apply_chat_template
  // passes every special token of the tokenizer; pass the ones the template reads).
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses `source`; a syntax error, an unknown filter or test is a TemplateError that names
  // `name`, the line:column and the offending text.
  explicit ChatTemplate(std::string source, std::string name = "chat_template");

  // What apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False,
  // **variables) renders, and the spans its {% generation %} blocks recorded (byte offsets,
  // see Note [Generation spans]). A template that refuses the conversation through
  // raise_exception throws TemplateRaised; template bugs throw TemplateError.
  // Safe to call from many threads at once on one instance: each call has its own scope and
  // output, the parsed template is read-only, and strftime_now() reads the local time with
  // localtime_r (or the clock below, which must then be safe to call concurrently too).
  Rendered render(const ChatTemplateInput& input) const;

  // strftime_now() reads this clock instead of the local time (for reproducible renders). Not to
  // be called while another thread renders.
  void set_clock(std::function<std::tm()> now) { options_.now = std::move(now); }

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }

 private:
  std::string name_;
  std::string source_;
  std::shared_ptr<const Body> body_;
  RenderOptions options_;
};

// The template named `name` in a tokenizer_config.json: its "chat_template" is either a string
// (the "default" template) or a list of {"name", "template"}. Missing: an error that lists the
// names there are.
std::string chat_template_from_tokenizer_config(const nlohmann::ordered_json& config,
                                                const std::string& name = "default");

}  // namespace qtrain::engine::text
