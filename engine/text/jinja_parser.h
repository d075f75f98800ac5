// Parses the token stream of jinja_lexer.h into the tree of jinja_ast.h, following jinja2's
// grammar and operator precedence (lowest first): `x if c else y`, or, and, not, comparisons
// and in/not in (chained), + -, ~, * / // %, **, unary - +, then postfix . [] () and the
// filters/tests `|f` and `is t`, which bind tighter than every binary operator.
#pragma once

#include <string>
#include <string_view>

#include "engine/text/jinja_ast.h"

namespace qtrain::engine::text {

// A syntax error is a TemplateError naming `name`, the line:column and the offending token.
Body parse_template(std::string_view source, const std::string& name);

}  // namespace qtrain::engine::text
