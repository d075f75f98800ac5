// See jinja_render.h.
#include "engine/text/jinja_render.h"

#include <chrono>

#include "engine/text/jinja_error.h"
#include "engine/text/jinja_filters.h"
#include "engine/text/jinja_lexer.h"
#include "engine/text/jinja_ops.h"

namespace qtrain::engine::text {

namespace {

// Note [Template scopes]
// jinja2's scoping, which templates rely on (and why they use namespace()):
// - The template's top level is one scope over the render variables and the globals; `set`
//   there (also inside if/elif/else, which open no scope) is seen by the rest of the template.
// - Every iteration of a `for` body is a fresh scope: a `set` inside it is gone at the next
//   iteration and after the loop; reads fall through to the enclosing scopes.
// - A macro body sees its arguments and the template's top-level scope (at call time), not
//   the scopes of its caller.
// - `loop` is the innermost loop's (each iteration scope binds its own).
struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

void check_namespace_name(const std::string& name) {
  if (!name.empty() && name[0] == '_') {
    throw JinjaRuntimeError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                            name + "'. Please rename the attribute.");
  }
}

class Renderer {
 public:
  Renderer(const std::string& name, std::string_view source, const RenderOptions& options)
      : name_(name), source_(source), options_(options) {
    buffers_.emplace_back();
    install_globals();
  }

  Rendered run(const Body& body, const Variables& variables) {
    for (const auto& [k, v] : variables) root_.set(k, v);
    const Flow flow = exec(body, root_);
    if (flow != Flow::normal) throw TemplateError(where_prefix(0, 0) + "break or continue outside a for loop");
    return Rendered{std::move(buffers_[0]), std::move(spans_)};
  }

 private:
  enum class Flow { normal, break_, continue_ };

  const std::string& name_;
  std::string_view source_;
  const RenderOptions& options_;
  Scope root_;
  std::vector<std::string> buffers_;  // [0]: the top-level output; more while capturing
  std::vector<std::pair<size_t, size_t>> spans_;
  int macro_depth_ = 0;
  const Expr* current_call_ = nullptr;

  std::string where_prefix(int line, int column) const { return describe_position(name_, line, column) + ": "; }

  void install_globals() {
    root_.set("raise_exception", Value::function("raise_exception", [this](CallArgs& a) -> Value {
                const std::string message = a.positional.empty() ? "" : a.positional[0].str();
                const int line = current_call_ ? current_call_->line : 0;
                const int column = current_call_ ? current_call_->column : 0;
                throw TemplateRaised("chat template '" + name_ + "' refused the input (raise_exception at line " +
                                         std::to_string(line) + ":" + std::to_string(column) + "): " + message,
                                     message);
              }));
    root_.set("strftime_now", Value::function("strftime_now", [this](CallArgs& a) {
                if (a.positional.size() != 1 || !a.positional[0].is_string()) {
                  throw JinjaRuntimeError("strftime_now(format) takes one string");
                }
                std::tm tm{};
                if (options_.now) {
                  tm = options_.now();
                } else {
                  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                  localtime_r(&t, &tm);
                }
                char buf[512];
                const size_t n = std::strftime(buf, sizeof(buf), a.positional[0].as_string().c_str(), &tm);
                return Value::string(std::string(buf, n));
              }));
    auto make_dict = [](CallArgs& a, Value out, const char* what) {
      if (a.positional.size() > 1)
        throw JinjaRuntimeError(std::string(what) + " takes at most one positional argument");
      auto put = [&](const std::string& k, const Value& v) {
        if (out.is_namespace()) check_namespace_name(k);
        out.as_dict().set(k, v);
      };
      if (!a.positional.empty()) {
        const Value& src = a.positional[0];
        if (src.is_dict()) {
          for (const auto& [k, v] : src.as_dict().items) put(k, v);
        } else if (src.is_list()) {
          for (const Value& pair : src.as_list()) {
            if (!pair.is_list() || pair.as_list().size() != 2 || !pair.as_list()[0].is_string()) {
              throw JinjaRuntimeError(std::string(what) + ": each item must be a (string key, value) pair");
            }
            put(pair.as_list()[0].as_string(), pair.as_list()[1]);
          }
        } else if (!src.is_undefined() && !src.is_none()) {
          throw JinjaRuntimeError(std::string(what) + ": cannot build a dict from " + src.type_name());
        }
      }
      for (const auto& [k, v] : a.keyword) put(k, v);
      return out;
    };
    root_.set("namespace", Value::function("namespace", [make_dict](CallArgs& a) {
                return make_dict(a, Value::namespace_object(), "namespace");
              }));
    root_.set("dict",
              Value::function("dict", [make_dict](CallArgs& a) { return make_dict(a, Value::dict(), "dict"); }));
    root_.set("range", Value::function("range", [](CallArgs& a) {
                if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) {
                  throw JinjaRuntimeError("range() takes 1 to 3 integer arguments");
                }
                int64_t v[3] = {0, 0, 1};
                for (size_t i = 0; i < a.positional.size(); ++i) {
                  if (!a.positional[i].is_int() && !a.positional[i].is_bool()) {
                    throw JinjaRuntimeError("range() takes integers, not " + a.positional[i].type_name());
                  }
                }
                if (a.positional.size() == 1) {
                  v[1] = a.positional[0].as_int();
                } else {
                  v[0] = a.positional[0].as_int();
                  v[1] = a.positional[1].as_int();
                  if (a.positional.size() == 3) v[2] = a.positional[2].as_int();
                }
                if (v[2] == 0) throw JinjaRuntimeError("range() arg 3 must not be zero");
                List out;
                for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
                  if (out.size() >= 1000000) throw JinjaRuntimeError("range() too large (more than 1000000 items)");
                  out.push_back(Value::integer(i));
                }
                return Value::list(std::move(out));
              }));
  }

  std::string& out() { return buffers_.back(); }

  std::string capture(const Body& body, Scope& scope, Flow* flow = nullptr) {
    buffers_.emplace_back();
    const Flow f = exec(body, scope);
    if (flow != nullptr) *flow = f;
    std::string text = std::move(buffers_.back());
    buffers_.pop_back();
    return text;
  }

  // Runs `fn`, turning the place-less errors of values and built-ins into TemplateErrors at (line, column).
  template <class Fn>
  auto at(int line, int column, Fn&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const JinjaRuntimeError& e) {
      throw TemplateError(where_prefix(line, column) + e.what() + quote_line(source_, line, column));
    }
  }

  Flow exec(const Body& body, Scope& scope) {
    for (const NodePtr& node : body) {
      const Flow f = exec_node(*node, scope);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec_node(const Node& node, Scope& scope) {
    switch (node.kind) {
      case Node::Kind::text:
        out() += node.text;
        return Flow::normal;
      case Node::Kind::output: {
        const Value v = eval(*node.expr, scope);
        out() += v.str();
        return Flow::normal;
      }
      case Node::Kind::if_:
        for (size_t i = 0; i < node.conds.size(); ++i) {
          if (eval(*node.conds[i], scope).truthy()) return exec(node.bodies[i], scope);
        }
        return exec(node.else_body, scope);
      case Node::Kind::for_:
        return exec_for(node, scope);
      case Node::Kind::set: {
        Value v = eval(*node.expr, scope);
        at(node.line, node.column, [&] { assign(node, scope, std::move(v)); });
        return Flow::normal;
      }
      case Node::Kind::set_block:
        scope.set(node.targets[0], Value::string(capture(node.bodies[0], scope)));
        return Flow::normal;
      case Node::Kind::macro:
        scope.set(node.name, make_macro(node));
        return Flow::normal;
      case Node::Kind::break_:
        return Flow::break_;
      case Node::Kind::continue_:
        return Flow::continue_;
      case Node::Kind::generation: {
        Flow flow = Flow::normal;
        const std::string text = capture(node.bodies[0], scope, &flow);
        const size_t start = buffers_[0].size();
        spans_.emplace_back(start, start + text.size());
        out() += text;
        return flow;
      }
    }
    return Flow::normal;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    const List items = v.is_list() || v.is_string() ? iterate(v) : List{};
    if (items.size() != targets.size()) {
      throw JinjaRuntimeError("cannot unpack " + v.repr() + " into " + std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  void assign(const Node& node, Scope& scope, Value v) {
    if (!node.attr.empty()) {
      const Value* ns = scope.find(node.targets[0]);
      if (ns == nullptr || !ns->is_namespace()) {
        throw JinjaRuntimeError("cannot assign attribute '" + node.attr + "' on '" + node.targets[0] +
                                "': it is not a namespace (create it with namespace(...))");
      }
      check_namespace_name(node.attr);
      ns->as_dict().set(node.attr, std::move(v));
      return;
    }
    bind_targets(node.targets, v, scope);
  }

  Flow exec_for(const Node& node, Scope& scope) {
    const Value iterable = eval(*node.expr, scope);
    List items = at(node.expr->line, node.expr->column, [&] { return iterate(iterable); });
    if (node.filter) {
      List kept;
      for (const Value& item : items) {
        Scope s{&scope, {}};
        at(node.line, node.column, [&] { bind_targets(node.targets, item, s); });
        if (eval(*node.filter, s).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Scope s{&scope, {}};
      at(node.line, node.column, [&] { bind_targets(node.targets, items[static_cast<size_t>(i)], s); });
      s.set("loop", make_loop(items, i));
      const Flow f = exec(node.bodies[0], s);
      if (f == Flow::break_) break;
    }
    if (n == 0) return exec(node.else_body, scope);
    return Flow::normal;
  }

  static Value make_loop(const List& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    Value loop = Value::dict();
    Dict& d = loop.as_dict();
    d.items.reserve(12);
    d.items.emplace_back("index0", Value::integer(i));
    d.items.emplace_back("index", Value::integer(i + 1));
    d.items.emplace_back("revindex0", Value::integer(n - i - 1));
    d.items.emplace_back("revindex", Value::integer(n - i));
    d.items.emplace_back("first", Value::boolean(i == 0));
    d.items.emplace_back("last", Value::boolean(i == n - 1));
    d.items.emplace_back("length", Value::integer(n));
    d.items.emplace_back("depth0", Value::integer(0));
    d.items.emplace_back("depth", Value::integer(1));
    d.items.emplace_back(
        "previtem",
        i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item (loop.previtem)"));
    d.items.emplace_back(
        "nextitem",
        i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item (loop.nextitem)"));
    d.items.emplace_back("cycle", Value::function("loop.cycle", [i](CallArgs& a) {
                           if (a.positional.empty()) throw JinjaRuntimeError("loop.cycle() needs at least one value");
                           return a.positional[static_cast<size_t>(i) % a.positional.size()];
                         }));
    return loop;
  }

  Value make_macro(const Node& node) {
    return Value::function(node.name, [this, &node](CallArgs& a) { return call_macro(node, a); });
  }

  Value call_macro(const Node& node, CallArgs& a) {
    if (a.positional.size() > node.params.size()) {
      throw JinjaRuntimeError("macro '" + node.name + "' takes not more than " + std::to_string(node.params.size()) +
                              " argument(s), " + std::to_string(a.positional.size()) + " were given");
    }
    for (const auto& [k, v] : a.keyword) {
      if (std::find(node.params.begin(), node.params.end(), k) == node.params.end()) {
        throw JinjaRuntimeError("macro '" + node.name + "' has no parameter '" + k + "'");
      }
    }
    if (macro_depth_ >= 100) throw JinjaRuntimeError("macro '" + node.name + "' recursed more than 100 levels deep");
    Scope s{&root_, {}};
    for (size_t i = 0; i < node.params.size(); ++i) {
      const std::string& p = node.params[i];
      if (i < a.positional.size()) {
        s.set(p, a.positional[i]);
        continue;
      }
      auto kw = std::find_if(a.keyword.begin(), a.keyword.end(), [&](const auto& kv) { return kv.first == p; });
      if (kw != a.keyword.end()) {
        s.set(p, kw->second);
      } else if (node.defaults[i]) {
        s.set(p, eval(*node.defaults[i], s));
      } else {
        s.set(p, Value::undefined("parameter '" + p + "' of macro '" + node.name + "' was not provided"));
      }
    }
    ++macro_depth_;
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{macro_depth_};
    return Value::string(capture(node.bodies[0], s));
  }

  Value eval(const Expr& e, Scope& scope) {
    return at(e.line, e.column, [&] { return eval_impl(e, scope); });
  }

  Value eval_impl(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name: {
        const Value* v = scope.find(e.name);
        return v != nullptr ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return e.kind == Expr::Kind::list ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Kind::dict: {
        Value d = Value::dict();
        for (size_t i = 0; i < e.args.size(); i += 2) {
          const Value key = eval(*e.args[i], scope);
          if (!key.is_string()) {
            throw JinjaRuntimeError("dict keys must be strings in chat templates, got " + key.type_name());
          }
          d.as_dict().set(key.as_string(), eval(*e.args[i + 1], scope));
        }
        return d;
      }
      case Expr::Kind::attr:
        return get_attr(eval(*e.args[0], scope), e.name);
      case Expr::Kind::item:
        return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::slice: {
        const Value obj = eval(*e.args[0], scope);
        Value bounds[3];
        for (int i = 0; i < 3; ++i) bounds[i] = e.args[i + 1] ? eval(*e.args[i + 1], scope) : Value::none();
        return get_slice(obj, bounds[0], bounds[1], bounds[2]);
      }
      case Expr::Kind::call: {
        const Value callee = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        if (callee.is_undefined()) throw JinjaRuntimeError(callee.undefined_hint() + " (so it cannot be called)");
        if (!callee.is_callable()) throw JinjaRuntimeError("'" + callee.type_name() + "' object is not callable");
        const Expr* saved = current_call_;
        current_call_ = &e;
        Value result = callee.as_callable().fn(args);
        current_call_ = saved;
        return result;
      }
      case Expr::Kind::filter: {
        const Value subject = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        return apply_filter(e.name, subject, args);
      }
      case Expr::Kind::test: {
        const Value subject = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        return Value::boolean(apply_test(e.name, subject, args) != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.is_undefined()) throw JinjaRuntimeError(v.undefined_hint());
        if (v.is_float()) return Value::floating(e.name == "-" ? -v.as_double() : v.as_double());
        if (v.is_int() || v.is_bool()) return Value::integer(e.name == "-" ? -v.as_int() : v.as_int());
        throw JinjaRuntimeError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::Kind::binary: {
        Value a = eval(*e.args[0], scope);
        if (e.name == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
        if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], scope);
        return binary_op(e.name, a, eval(*e.args[1], scope));
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "in" || op == "not in") {
            ok = contains(right, left) == (op == "in");
          } else {
            if ((op != "==" && op != "!=") && (left.is_undefined() || right.is_undefined())) {
              throw JinjaRuntimeError((left.is_undefined() ? left : right).undefined_hint());
            }
            if (op == "==") {
              ok = left == right;
            } else if (op == "!=") {
              ok = !(left == right);
            } else if (op == "<") {
              ok = value_less(left, right);
            } else if (op == "<=") {
              ok = !value_less(right, left);
            } else if (op == ">") {
              ok = value_less(right, left);
            } else {
              ok = !value_less(left, right);
            }
          }
          if (!ok) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::cond:
        if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("the inline if had no else and was false");
    }
    return Value();
  }

  CallArgs eval_args(const Expr& e, Scope& scope) {
    CallArgs args;
    for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    if (e.star_args) {
      for (Value& v : iterate(eval(*e.star_args, scope))) args.positional.push_back(std::move(v));
    }
    if (e.star_kwargs) {
      const Value d = eval(*e.star_kwargs, scope);
      if (!d.is_dict()) throw JinjaRuntimeError("** needs a dict, got " + d.type_name());
      for (const auto& [k, v] : d.as_dict().items) args.keyword.emplace_back(k, v);
    }
    return args;
  }
};

void check_expr(const Expr* e, const std::string& name, std::string_view source) {
  if (e == nullptr) return;
  if (e->kind == Expr::Kind::filter && !has_filter(e->name)) {
    throw TemplateError(describe_position(name, e->line, e->column) + ": no filter named '" + e->name +
                        "' (docs/DATA.md, Chat templates, lists the filters qtrain supports)" +
                        quote_line(source, e->line, e->column));
  }
  if (e->kind == Expr::Kind::test && !has_test(e->name)) {
    throw TemplateError(describe_position(name, e->line, e->column) + ": no test named '" + e->name +
                        "' (docs/DATA.md, Chat templates, lists the tests qtrain supports)" +
                        quote_line(source, e->line, e->column));
  }
  for (const auto& a : e->args) check_expr(a.get(), name, source);
  for (const auto& [k, v] : e->kwargs) check_expr(v.get(), name, source);
  check_expr(e->star_args.get(), name, source);
  check_expr(e->star_kwargs.get(), name, source);
}

void check_body(const Body& body, const std::string& name, std::string_view source) {
  for (const NodePtr& n : body) {
    check_expr(n->expr.get(), name, source);
    check_expr(n->filter.get(), name, source);
    for (const auto& c : n->conds) check_expr(c.get(), name, source);
    for (const auto& d : n->defaults) check_expr(d.get(), name, source);
    for (const auto& b : n->bodies) check_body(b, name, source);
    check_body(n->else_body, name, source);
  }
}

}  // namespace

Rendered render_template(const Body& body,
                         const std::string& name,
                         std::string_view source,
                         const Variables& variables,
                         const RenderOptions& options) {
  return Renderer(name, source, options).run(body, variables);
}

void check_template_names(const Body& body, const std::string& name, std::string_view source) {
  check_body(body, name, source);
}

}  // namespace qtrain::engine::text
