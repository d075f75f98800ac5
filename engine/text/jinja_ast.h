// The syntax tree of a parsed chat template: expressions and statements. Each node keeps its
// line:column so that errors at render time name the place.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/text/jinja_value.h"

namespace qtrain::engine::text {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,  // value
    name,     // name
    list,     // args: items
    tuple,    // args: items
    dict,     // args: key, value, key, value, ...
    attr,     // args[0].name
    item,     // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]], each bound may be null
    call,     // args[0](args[1..], kwargs)
    filter,   // args[0] | name(args[1..], kwargs)
    test,     // args[0] is [not] name(args[1..])
    unary,    // name in {"-", "+", "not"}: name args[0]
    binary,   // args[0] name args[1]; name: + - * / // % ** ~ and or
    compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained, as Python)
    cond,     // args[0] if args[1] else args[2] (args[2] may be null: Undefined)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr star_args;    // call(*star_args): more positional arguments
  ExprPtr star_kwargs;  // call(**star_kwargs): more keyword arguments
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    text,       // text
    output,     // {{ expr }}
    if_,        // if conds[i]: bodies[i]; else: else_body
    for_,       // for targets in expr [if filter]: bodies[0]; else: else_body
    set,        // set targets = expr; or set targets[0].attr = expr (attr non-empty)
    set_block,  // set targets[0] %} bodies[0] {% endset
    macro,      // macro name(params = defaults) bodies[0]
    break_,
    continue_,
    generation,  // generation %} bodies[0] {% endgeneration
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr filter;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
};

}  // namespace qtrain::engine::text
