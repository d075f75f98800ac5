// See jinja_parser.h.
#include "engine/text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "engine/text/jinja_error.h"
#include "engine/text/jinja_lexer.h"

namespace qtrain::engine::text {

namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case Token::Type::text:
      return "template text";
    case Token::Type::var_begin:
      return "'{{'";
    case Token::Type::var_end:
      return "'}}'";
    case Token::Type::block_begin:
      return "'{%'";
    case Token::Type::block_end:
      return "'%}'";
    case Token::Type::string:
      return "the string " + python_string_repr(t.value);
    case Token::Type::eof:
      return "the end of the template";
    default:
      return "'" + t.value + "'";
  }
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name, std::string_view source)
      : tokens_(std::move(tokens)), name_(name), source_(source) {}

  Body parse() {
    std::string found;
    Body body = parse_until({}, found, "");
    return body;
  }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const std::string& name_;
  std::string_view source_;

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t k = 1) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    throw TemplateError(describe_position(name_, at.line, at.column) + ": " + message +
                        quote_line(source_, at.line, at.column));
  }

  bool is_op(std::string_view op) const { return cur().type == Token::Type::op && cur().value == op; }
  bool is_name(std::string_view n) const { return cur().type == Token::Type::name && cur().value == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(cur(), "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name(const std::string& what) {
    if (cur().type != Token::Type::name) fail(cur(), "expected " + what + ", got " + describe(cur()));
    return next().value;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().type != Token::Type::block_end) {
      fail(cur(), "expected '%}' to end the '" + tag + "' tag, got " + describe(cur()));
    }
    next();
  }

  // Statements up to a `{% X %}` with X in `ends` (X is consumed into `found`, the rest of that
  // tag is left to the caller). `opener` names the statement being closed, for errors.
  Body parse_until(std::initializer_list<std::string_view> ends, std::string& found, const std::string& opener) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case Token::Type::eof: {
          if (ends.size() == 0) return body;
          std::string expected;
          for (const auto& end : ends) expected += (expected.empty() ? "{% " : " or {% ") + std::string(end) + " %}";
          fail(t, "the template ends inside " + opener + ": expected " + expected);
        }
        case Token::Type::text: {
          auto node = make_node(Node::Kind::text, t);
          node->text = t.value;
          body.push_back(std::move(node));
          next();
          break;
        }
        case Token::Type::var_begin: {
          auto node = make_node(Node::Kind::output, t);
          next();
          node->expr = parse_tuple_or_expression();
          if (cur().type != Token::Type::var_end) fail(cur(), "expected '}}', got " + describe(cur()));
          next();
          body.push_back(std::move(node));
          break;
        }
        case Token::Type::block_begin: {
          const Token& tag = peek();
          if (tag.type == Token::Type::name &&
              std::find(ends.begin(), ends.end(), std::string_view(tag.value)) != ends.end()) {
            next();
            found = next().value;
            return body;
          }
          body.push_back(parse_statement());
          break;
        }
        default:
          fail(t, "unexpected " + describe(t));
      }
    }
  }

  NodePtr make_node(Node::Kind kind, const Token& at) const {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = at.line;
    node->column = at.column;
    return node;
  }

  NodePtr parse_statement() {
    const Token& begin = next();  // {%
    const Token& tag_token = cur();
    if (tag_token.type != Token::Type::name)
      fail(tag_token, "expected a tag name after '{%', got " + describe(tag_token));
    const std::string tag = next().value;
    const std::string where = "the '" + tag + "' at line " + std::to_string(begin.line);
    if (tag == "if") return parse_if(begin, where);
    if (tag == "for") return parse_for(begin, where);
    if (tag == "set") return parse_set(begin, where);
    if (tag == "macro") return parse_macro(begin, where);
    if (tag == "generation") {
      auto node = make_node(Node::Kind::generation, begin);
      expect_block_end(tag);
      std::string found;
      node->bodies.push_back(parse_until({"endgeneration"}, found, where));
      expect_block_end(found);
      return node;
    }
    if (tag == "break" || tag == "continue") {
      auto node = make_node(tag == "break" ? Node::Kind::break_ : Node::Kind::continue_, begin);
      expect_block_end(tag);
      return node;
    }
    if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
      fail(tag_token, "unexpected {% " + tag + " %}: no open block here takes it");
    }
    fail(tag_token,
         "unknown tag '" + tag + "' (chat templates may use if, for, set, macro, break, continue, generation and raw)");
  }

  NodePtr parse_if(const Token& begin, const std::string& where) {
    auto node = make_node(Node::Kind::if_, begin);
    node->conds.push_back(parse_expression());
    expect_block_end("if");
    while (true) {
      std::string found;
      Body body = parse_until({"elif", "else", "endif"}, found, where);
      if (found == "elif") {
        node->bodies.push_back(std::move(body));
        node->conds.push_back(parse_expression());
        expect_block_end("elif");
      } else if (found == "else") {
        node->bodies.push_back(std::move(body));
        expect_block_end("else");
        node->else_body = parse_until({"endif"}, found, where);
        expect_block_end("endif");
        return node;
      } else {
        node->bodies.push_back(std::move(body));
        expect_block_end("endif");
        return node;
      }
    }
  }

  NodePtr parse_for(const Token& begin, const std::string& where) {
    auto node = make_node(Node::Kind::for_, begin);
    const bool parenthesized = skip_op("(");
    do {
      node->targets.push_back(expect_name("a loop variable name"));
    } while (skip_op(","));
    if (parenthesized) expect_op(")");
    if (!skip_name("in")) fail(cur(), "expected 'in' in the for tag, got " + describe(cur()));
    node->expr = parse_expression(false);
    if (is_op(",")) {  // `for x in a, b`: a tuple
      auto tuple = make_expr(Expr::Kind::tuple, cur());
      tuple->args.push_back(std::move(node->expr));
      while (skip_op(",")) {
        if (cur().type == Token::Type::block_end || is_name("if")) break;
        tuple->args.push_back(parse_expression(false));
      }
      node->expr = std::move(tuple);
    }
    if (skip_name("if")) node->filter = parse_expression();
    if (is_name("recursive")) fail(cur(), "recursive for loops are not supported in chat templates");
    expect_block_end("for");
    std::string found;
    node->bodies.push_back(parse_until({"else", "endfor"}, found, where));
    if (found == "else") {
      expect_block_end("else");
      node->else_body = parse_until({"endfor"}, found, where);
    }
    expect_block_end("endfor");
    return node;
  }

  NodePtr parse_set(const Token& begin, const std::string& where) {
    auto node = make_node(Node::Kind::set, begin);
    node->targets.push_back(expect_name("a variable name after 'set'"));
    if (skip_op(".")) {
      node->attr = expect_name("an attribute name after '" + node->targets[0] + ".'");
    } else {
      while (skip_op(",")) node->targets.push_back(expect_name("a variable name"));
    }
    if (skip_op("=")) {
      node->expr = parse_tuple_or_expression();
      expect_block_end("set");
      return node;
    }
    if (cur().type != Token::Type::block_end || node->targets.size() != 1 || !node->attr.empty()) {
      fail(cur(), "expected '=' or '%}' in the set tag, got " + describe(cur()));
    }
    next();
    node->kind = Node::Kind::set_block;
    std::string found;
    node->bodies.push_back(parse_until({"endset"}, found, where));
    expect_block_end("endset");
    return node;
  }

  NodePtr parse_macro(const Token& begin, const std::string& where) {
    auto node = make_node(Node::Kind::macro, begin);
    node->name = expect_name("a macro name");
    expect_op("(");
    while (!is_op(")")) {
      if (!node->params.empty()) expect_op(",");
      if (is_op(")")) break;
      node->params.push_back(expect_name("a parameter name"));
      node->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
    expect_op(")");
    expect_block_end("macro");
    std::string found;
    node->bodies.push_back(parse_until({"endmacro"}, found, where));
    if (cur().type == Token::Type::name) next();  // {% endmacro name %}
    expect_block_end("endmacro");
    return node;
  }

  // ---- expressions ----

  ExprPtr make_expr(Expr::Kind kind, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // `{{ a, b }}` and `set x = a, b` make a tuple, as in jinja2.
  ExprPtr parse_tuple_or_expression() {
    const Token& at = cur();
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto tuple = make_expr(Expr::Kind::tuple, at);
    tuple->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == Token::Type::var_end || cur().type == Token::Type::block_end) break;
      tuple->args.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr = true) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      auto cond = make_expr(Expr::Kind::cond, at);
      cond->args.push_back(std::move(e));
      cond->args.push_back(parse_or());
      cond->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr left, ExprPtr right) {
    auto e = make_expr(Expr::Kind::binary, at);
    e->name = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      auto e = make_expr(Expr::Kind::unary, at);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr chain;
    while (true) {
      std::string op;
      if (cur().type == Token::Type::op &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Token::Type::name && peek().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = make_expr(Expr::Kind::compare, at);
        chain->args.push_back(std::move(first));
      }
      chain->ops.push_back(op);
      chain->args.push_back(parse_math1());
    }
    return chain ? std::move(chain) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at, at.value, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary(at, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      e = binary(at, at.value, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (is_op("**")) {
      const Token& at = next();
      e = binary(at, "**", std::move(e), parse_unary());
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = make_expr(Expr::Kind::unary, at);
      e->name = at.value;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case Token::Type::name: {
        next();
        static const std::pair<const char*, int> constants[] = {
            {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (const auto& [word, which] : constants) {
          if (t.value == word) {
            auto e = make_expr(Expr::Kind::literal, t);
            e->value = which == 2 ? Value::none() : Value::boolean(which == 1);
            return e;
          }
        }
        auto e = make_expr(Expr::Kind::name, t);
        e->name = t.value;
        return e;
      }
      case Token::Type::string: {
        std::string s;
        while (cur().type == Token::Type::string) s += next().value;  // adjacent literals join
        auto e = make_expr(Expr::Kind::literal, t);
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Type::integer: {
        next();
        auto e = make_expr(Expr::Kind::literal, t);
        try {
          e->value = Value::integer(std::stoll(t.value));
        } catch (const std::out_of_range&) {
          fail(t, "the integer " + t.value + " does not fit in 64 bits");
        }
        return e;
      }
      case Token::Type::floating: {
        next();
        auto e = make_expr(Expr::Kind::literal, t);
        e->value = Value::floating(std::stod(t.value));
        return e;
      }
      case Token::Type::op:
        if (t.value == "(") return parse_parenthesized();
        if (t.value == "[") return parse_list();
        if (t.value == "{") return parse_dict();
        [[fallthrough]];
      default:
        fail(t, "expected an expression, got " + describe(t));
    }
  }

  ExprPtr parse_parenthesized() {
    const Token& at = next();
    if (skip_op(")")) return make_expr(Expr::Kind::tuple, at);
    ExprPtr first = parse_expression();
    if (skip_op(")")) return first;
    auto tuple = make_expr(Expr::Kind::tuple, at);
    tuple->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_op(")")) break;
      tuple->args.push_back(parse_expression());
    }
    expect_op(")");
    return tuple;
  }

  ExprPtr parse_list() {
    auto e = make_expr(Expr::Kind::list, next());
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression());
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make_expr(Expr::Kind::dict, next());
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args.push_back(parse_expression());
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        if (cur().type == Token::Type::integer) {
          auto item = make_expr(Expr::Kind::item, at);
          auto key = make_expr(Expr::Kind::literal, cur());
          key->value = Value::integer(std::stoll(next().value));
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(key));
          e = std::move(item);
        } else {
          auto attr = make_expr(Expr::Kind::attr, at);
          attr->name = expect_name("an attribute name after '.'");
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Token& at = next();  // [
    ExprPtr bounds[3];
    bool is_slice = false;
    if (!is_op(":")) {
      bounds[0] = parse_expression();
      if (!is_op(":")) {
        expect_op("]");
        auto item = make_expr(Expr::Kind::item, at);
        item->args.push_back(std::move(target));
        item->args.push_back(std::move(bounds[0]));
        return item;
      }
    }
    is_slice = true;
    next();  // the first ':'
    if (!is_op(":") && !is_op("]")) bounds[1] = parse_expression();
    if (skip_op(":") && !is_op("]")) bounds[2] = parse_expression();
    expect_op("]");
    auto slice = make_expr(Expr::Kind::slice, at);
    slice->args.push_back(std::move(target));
    for (auto& b : bounds) slice->args.push_back(std::move(b));
    (void)is_slice;
    return slice;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (call.args.size() > 1 || !call.kwargs.empty() || call.star_args || call.star_kwargs) expect_op(",");
      if (is_op(")")) break;
      if (skip_op("*")) {
        call.star_args = parse_expression();
      } else if (skip_op("**")) {
        call.star_kwargs = parse_expression();
      } else if (cur().type == Token::Type::name && peek().type == Token::Type::op && peek().value == "=") {
        std::string key = next().value;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail(cur(), "a positional argument cannot follow keyword arguments");
        call.args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make_expr(Expr::Kind::call, cur());
    call->args.push_back(std::move(callee));
    parse_call_args(*call);
    return call;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const Token& at = next();
        auto f = make_expr(Expr::Kind::filter, at);
        f->name = expect_name("a filter name after '|'");
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const Token& at = next();
        auto t = make_expr(Expr::Kind::test, at);
        t->negated = skip_name("not");
        t->name = expect_name("a test name after 'is'");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == Token::Type::name && !is_name("else") && !is_name("or") && !is_name("and")) ||
                   cur().type == Token::Type::string || cur().type == Token::Type::integer ||
                   cur().type == Token::Type::floating || is_op("[") || is_op("{")) {
          t->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse_template(std::string_view source, const std::string& name) {
  return Parser(lex_template(source, name), name, source).parse();
}

}  // namespace qtrain::engine::text
