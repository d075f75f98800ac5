// Splits a chat template into text and the tokens inside {{ }} and {% %}, applying the
// whitespace rules of transformers' Jinja environment. See Note [Template whitespace].
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qtrain::engine::text {

// Note [Template whitespace]
// transformers renders with trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False
// (jinja2 3.1). What that does to the text around tags, in the order jinja2's lexer applies it:
// - Newlines: "\r\n" and "\r" become "\n" everywhere, and one final "\n" of the template
//   is dropped (keep_trailing_newline=False).
// - `{%-`, `{{-`, `{#-` strip all whitespace (newlines included) before the tag;
//   `-%}`, `-}}`, `-#}` strip all whitespace after it.
// - trim_blocks: the first "\n" right after `%}` or `#}` is removed (not after `}}`, and not
//   after `+%}`, which keeps it).
// - lstrip_blocks: spaces and tabs between the start of a line and `{%` or `{#` are removed,
//   unless the tag is written `{%+`. Not for `{{`. "Start of a line" also holds at the start
//   of the template and right after a tag whose own text ended with a newline (a trimmed `%}\n`).
// - `{% raw %}…{% endraw %}` keeps its body verbatim; `{% raw %}` does not trim a newline.

struct Token {
  enum class Type {
    text,         // template text, whitespace rules applied
    var_begin,    // {{
    var_end,      // }}
    block_begin,  // {%
    block_end,    // %}
    name,
    string,  // value: the unescaped string
    integer,
    floating,
    op,  // value: the operator, e.g. "==", "(", "|"
    eof,
  };
  Type type;
  std::string value;
  int line = 0;
  int column = 0;
};

// `name` is used in error messages ("chat template 'chatml' line 3:7: ...").
std::vector<Token> lex_template(std::string_view source, const std::string& name);

// "chat template 'NAME' line 3:7", the start of error messages.
std::string describe_position(const std::string& name, int line, int column);
// " (in `TEXT`)": the template's line `line` (1-based, leading whitespace dropped, long lines
// cut around `column`), the end of error messages.
std::string quote_line(std::string_view source, int line, int column);

}  // namespace qtrain::engine::text
