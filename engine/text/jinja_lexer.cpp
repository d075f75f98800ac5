// See jinja_lexer.h, Note [Template whitespace].
#include "engine/text/jinja_lexer.h"

#include <algorithm>
#include <cstdint>

#include "engine/text/jinja_error.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {

std::string describe_position(const std::string& name, int line, int column) {
  return "chat template '" + name + "' line " + std::to_string(line) + ":" + std::to_string(column);
}

std::string quote_line(std::string_view source, int line, int column) {
  size_t start = 0;
  for (int l = 1; l < line && start < source.size(); ++l) {
    const size_t nl = source.find_first_of("\r\n", start);
    if (nl == std::string_view::npos) return "";
    start = nl + (source.compare(nl, 2, "\r\n") == 0 ? 2 : 1);
  }
  size_t end = source.find_first_of("\r\n", start);
  if (end == std::string_view::npos) end = source.size();
  std::string_view text = source.substr(start, end - start);
  size_t col = column > 0 ? static_cast<size_t>(column - 1) : 0;
  const size_t indent = std::min(text.find_first_not_of(" \t"), text.size());
  text.remove_prefix(indent);
  col = col > indent ? col - indent : 0;
  std::string out(text);
  if (out.size() > 120) {
    const size_t from = col > 60 ? col - 60 : 0;
    out = (from > 0 ? "..." : "") + out.substr(from, 120) + (from + 120 < out.size() ? "..." : "");
  }
  return out.empty() ? "" : " (in `" + out + "`)";
}

namespace {

// The byte length of the Python whitespace character (str.isspace(), regex \s) that starts at
// s[i], or 0. jinja2's stripping uses Python's \s, which includes U+00A0, U+3000 and friends.
size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[i]);
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (c == 0xC2) return byte(1) == 0x85 || byte(1) == 0xA0 ? 2 : 0;
  if (c == 0xE1) return byte(1) == 0x9A && byte(2) == 0x80 ? 3 : 0;
  if (c == 0xE2 && byte(1) == 0x80) {
    const unsigned b = byte(2);
    return (b >= 0x80 && b <= 0x8A) || b == 0xA8 || b == 0xA9 || b == 0xAF ? 3 : 0;
  }
  if (c == 0xE2) return byte(1) == 0x81 && byte(2) == 0x9F ? 3 : 0;
  if (c == 0xE3) return byte(1) == 0x80 && byte(2) == 0x80 ? 3 : 0;
  return 0;
}

// The length of s once trailing Python whitespace is removed (str.rstrip()).
size_t rstrip_length(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t k = 1;
    while (k < 3 && k < end && (static_cast<unsigned char>(s[end - k]) & 0xC0) == 0x80) ++k;
    if (space_at(s, end - k) != k) break;
    end -= k;
  }
  return end;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : name_(name) {
    // Newlines normalized, one trailing newline dropped (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      std::string text = src_.substr(pos, tag - pos);
      apply_left_strip(text, sign, kind != '{', line_starting);
      emit_text(std::move(text), pos);

      size_t end;
      if (kind == '#') {
        end = lex_comment(tag, p);
      } else if (kind == '%' && is_raw_begin(p, end)) {
        end = lex_raw(tag, end);
      } else {
        end = lex_tag(tag, p, kind == '%');
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    out_.push_back(Token{Token::Type::eof, "", line_of(n), column_of(n)});
    return std::move(out_);
  }

 private:
  std::string src_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;

  int line_of(size_t offset) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return static_cast<int>(lo) + 1;
  }
  int column_of(size_t offset) const { return static_cast<int>(offset - line_starts_[line_of(offset) - 1]) + 1; }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    throw TemplateError(describe_position(name_, line_of(offset), column_of(offset)) + ": " + message +
                        quote_line(src_, line_of(offset), column_of(offset)));
  }

  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t b = src_.find('{', pos);
      if (b == std::string::npos || b + 1 >= src_.size()) return std::string::npos;
      const char c = src_[b + 1];
      if (c == '{' || c == '%' || c == '#') return b;
      pos = b + 1;
    }
  }

  // `{%-` strips all whitespace before the tag; otherwise lstrip_blocks strips the spaces of
  // the tag's own line for `{%` and `{#`, unless written `{%+`.
  static void apply_left_strip(std::string& text, char sign, bool is_block_or_comment, bool line_starting) {
    if (sign == '-') {
      text.resize(rstrip_length(text));
    } else if (sign != '+' && is_block_or_comment) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          rstrip_length(std::string_view(text).substr(l_pos)) == 0) {
        text.resize(l_pos);
      }
    }
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    out_.push_back(Token{Token::Type::text, std::move(text), line_of(offset), column_of(offset)});
  }

  size_t skip_spaces(size_t p) const {
    while (size_t n = space_at(src_, p)) p += n;
    return p;
  }

  // The end of a closing `-%}`/`%}`/`+%}` (or `#}`) at `close`, where the closer's first
  // character is at close; `sign` is the character before it.
  size_t after_close(size_t close_end, char sign) const {
    if (sign == '-') return skip_spaces(close_end);
    if (sign == '+') return close_end;
    return close_end < src_.size() && src_[close_end] == '\n' ? close_end + 1 : close_end;  // trim_blocks
  }

  size_t lex_comment(size_t tag, size_t p) {
    const size_t e = src_.find("#}", p);
    if (e == std::string::npos) fail(tag, "the comment that starts here has no closing '#}'");
    const char sign = e > p && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : 0;
    return after_close(e + 2, sign);
  }

  // `{% raw %}` / `{%- raw -%}` at p (just after `{%` and its sign); end: just after it.
  bool is_raw_begin(size_t p, size_t& end) const {
    p = skip_spaces(p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_spaces(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      end = skip_spaces(p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      end = p + 2;  // no trim_blocks after raw (as jinja2)
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t tag, size_t body) {
    size_t search = body;
    while (true) {
      const size_t b = src_.find("{%", search);
      if (b == std::string::npos) fail(tag, "the raw block that starts here has no {% endraw %}");
      size_t p = b + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_spaces(p);
      if (src_.compare(p, 6, "endraw") == 0) {
        p = skip_spaces(p + 6);
        char close_sign = 0;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) close_sign = src_[p++];
        if (src_.compare(p, 2, "%}") == 0) {
          std::string text = src_.substr(body, b - body);
          const bool line_starting = body > 0 && src_[body - 1] == '\n';
          apply_left_strip(text, sign, true, line_starting);
          emit_text(std::move(text), body);
          return after_close(p + 2, close_sign);
        }
      }
      search = b + 2;
    }
  }

  size_t lex_tag(size_t tag, size_t p, bool block) {
    out_.push_back(Token{block ? Token::Type::block_begin : Token::Type::var_begin, "", line_of(tag), column_of(tag)});
    std::vector<char> brackets;
    const size_t n = src_.size();
    while (true) {
      p = skip_spaces(p);
      if (p >= n) fail(tag, std::string("the tag that starts here has no closing '") + (block ? "%}" : "}}") + "'");
      if (brackets.empty()) {
        const char* close = block ? "%}" : "}}";
        if (src_.compare(p, 2, close) == 0) {
          out_.push_back(Token{block ? Token::Type::block_end : Token::Type::var_end, "", line_of(p), column_of(p)});
          return block ? after_close(p + 2, 0) : p + 2;
        }
        if ((src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, close) == 0) {
          out_.push_back(Token{block ? Token::Type::block_end : Token::Type::var_end, "", line_of(p), column_of(p)});
          return after_close(p + 3, src_[p]);
        }
      }
      p = lex_token(p, brackets);
    }
  }

  size_t lex_token(size_t p, std::vector<char>& brackets) {
    const size_t n = src_.size();
    const char c = src_[p];
    const int line = line_of(p), column = column_of(p);
    auto push = [&](Token::Type type, std::string value) {
      out_.push_back(Token{type, std::move(value), line, column});
    };
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p + 1;
      while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      push(Token::Type::name, src_.substr(p, e - p));
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p, push);
    if (c == '\'' || c == '"') return lex_string(p, push);
    static const char* const two_char_ops[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two_char_ops) {
      if (src_.compare(p, 2, op) == 0) {
        push(Token::Type::op, op);
        return p + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      fail(p, std::string("unexpected character '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty() || brackets.back() != c) fail(p, std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    push(Token::Type::op, std::string(1, c));
    return p + 1;
  }

  template <class Push>
  size_t lex_number(size_t p, Push& push) {
    const size_t n = src_.size();
    auto digits = [&](size_t e) {
      while (e < n && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                       (src_[e] == '_' && e + 1 < n && std::isdigit(static_cast<unsigned char>(src_[e + 1]))))) {
        ++e;
      }
      return e;
    };
    size_t e = digits(p);
    bool is_float = false;
    // `a.0.1` is two attribute lookups in jinja2, not a float (its float rule has (?<!\.)).
    const bool after_dot = !out_.empty() && out_.back().type == Token::Type::op && out_.back().value == ".";
    if (!after_dot && e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < n && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < n && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    push(is_float ? Token::Type::floating : Token::Type::integer, text);
    return e;
  }

  // Python string-literal escapes (jinja2 decodes literals with "unicode-escape").
  template <class Push>
  size_t lex_string(size_t p, Push& push) {
    const char quote = src_[p];
    const size_t n = src_.size();
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= n) fail(p, "the string that starts here is not closed");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= n) {
        value += c;
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      auto hex = [&](int count) {
        uint32_t cp = 0;
        for (int k = 0; k < count; ++k, ++i) {
          if (i >= n || !std::isxdigit(static_cast<unsigned char>(src_[i]))) {
            fail(i, "a \\x, \\u or \\U escape needs " + std::to_string(count) + " hex digits");
          }
          cp = cp * 16 + static_cast<uint32_t>(std::stoi(std::string(1, src_[i]), nullptr, 16));
        }
        utf8_append(value, cp);
      };
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < n && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) cp = cp * 8 + (src_[i] - '0');
            utf8_append(value, cp);
          } else {
            value += '\\';  // unknown escapes stay as written
            value += e;
          }
      }
    }
    push(Token::Type::string, std::move(value));
    return i + 1;
  }
};

}  // namespace

std::vector<Token> lex_template(std::string_view source, const std::string& name) {
  return Lexer(source, name).run();
}

}  // namespace qtrain::engine::text
