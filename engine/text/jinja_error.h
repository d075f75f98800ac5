// Errors of the chat-template engine.
//
// TemplateError: the template is wrong (a syntax error, an unknown filter, a method that does
// not exist, an operation on the wrong types). The message names the template, the line:column
// and the offending text.
// TemplateRaised: the template itself refused the data through raise_exception(msg), e.g.
// "Conversation roles must alternate user/assistant/user/assistant/...". The message includes
// the template's own text, and template_message() is exactly that text.
#pragma once

#include <stdexcept>
#include <string>

namespace qtrain::engine::text {

class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TemplateRaised : public TemplateError {
 public:
  TemplateRaised(const std::string& what, std::string template_message)
      : TemplateError(what), template_message_(std::move(template_message)) {}
  const std::string& template_message() const { return template_message_; }

 private:
  std::string template_message_;
};

// Thrown by values and built-ins, which do not know where in the template they are; the
// renderer adds the place and rethrows it as a TemplateError.
class JinjaRuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace qtrain::engine::text
