// Renders a parsed template with a set of variables: the tree-walking evaluator, scopes,
// loops, macros and the globals of transformers' environment (raise_exception, strftime_now,
// namespace, range, dict). See Note [Template scopes] and Note [Generation spans].
#pragma once

#include <cstddef>
#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/text/jinja_ast.h"
#include "engine/text/jinja_value.h"

namespace qtrain::engine::text {

// Note [Generation spans]
// transformers' `{% generation %}…{% endgeneration %}` renders its body and records
// (start, end) where start is the length of the template's top-level output so far and end =
// start + the body's length. Python counts characters; qtrain records UTF-8 byte offsets into
// the rendered text (the same places, in the units the tokenizer's offsets use). Like
// transformers, a generation block inside a macro or a `{% set %}` block counts from the
// top-level output at that moment, not from where the macro's result ends up.

struct RenderOptions {
  // strftime_now(format); unset: the local clock, as transformers does (datetime.now()).
  std::function<std::tm()> now;
};

struct Rendered {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation_spans;  // [start, end) byte offsets into text
};

using Variables = std::vector<std::pair<std::string, Value>>;

// `source` is the template's text, quoted in error messages.
Rendered render_template(const Body& body,
                         const std::string& name,
                         std::string_view source,
                         const Variables& variables,
                         const RenderOptions& options = {});

// Every filter and test the template names exists (jinja2 checks this when it compiles a
// template); otherwise a TemplateError naming the place and the unknown name.
void check_template_names(const Body& body, const std::string& name, std::string_view source);

}  // namespace qtrain::engine::text
