// The values a chat template computes with: Python's None, bool, int, float, str, list,
// tuple and insertion-ordered dict, plus Jinja's Undefined, namespaces and callables.
// Lists, dicts and namespaces are shared by reference, as in Python, so that `ns.x = ...`
// inside a loop is seen after it.
//
// See Note [Jinja semantics we reproduce] for the rules (truthiness, printing, equality).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace qtrain::engine::text {

// Note [Jinja semantics we reproduce]
// The rules of jinja2 3.1 (Python 3) that change what a template prints:
// - Truthiness is Python's: None, False, 0, 0.0, "", [] and {} are false; Undefined is false.
// - Undefined (a missing variable, key or attribute) prints as "", iterates as empty, has
//   length 0 and is `defined` false. Reading an attribute of it, calling it, or doing
//   arithmetic or ordering with it is an error (jinja2's default Undefined).
// - Printing uses Python's str(): True/False/None, floats in repr form (1.0, 1e-07,
//   1e+16), lists and dicts in repr form (['a', 1], {'k': None}).
// - bool is a number: True == 1, True + 1 == 2, `True is number`.
// - Integers are int64 (Python's are unbounded; a template that overflows is an error).
// - `/` always gives a float; `//` and `%` round towards minus infinity like Python.
// - Strings are UTF-8; length, indexing and slicing count code points.

class Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, callable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(std::string s);
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value namespace_object();
  static Value function(std::string name, std::function<Value(CallArgs&)> fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }  // lists and tuples
  bool is_tuple() const { return kind_ == Kind::list && tuple_; }
  bool is_dict() const { return kind_ == Kind::dict && !namespace_; }
  bool is_namespace() const { return kind_ == Kind::dict && namespace_; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }  // integer or boolean
  double as_double() const;              // any number
  const std::string& as_string() const { return *s_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }  // dicts and namespaces
  Callable& as_callable() const { return *fn_; }
  // Why this Undefined is undefined ("'foo' is undefined"), for errors.
  const std::string& undefined_hint() const;

  bool truthy() const;
  // Python's str(x); Undefined gives "".
  std::string str() const;
  // Python's repr(x).
  std::string repr() const;
  // Python's type name ("str", "int", "dict", ...), for errors.
  std::string type_name() const;
  // Plain JSON; Undefined and callables are errors (what() names them).
  nlohmann::ordered_json to_json() const;

  // Python ==.
  friend bool operator==(const Value& a, const Value& b);
  // Identity for lists/dicts (jinja's `sameas`), == for the rest.
  bool same_as(const Value& other) const;

 private:
  Kind kind_ = Kind::undefined;
  bool b_ = false;
  bool tuple_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;  // string, or the hint of an Undefined
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// An insertion-ordered dict with string keys (chat data is JSON, whose keys are strings).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

// Python's repr(float): the shortest digits that read back the same, "1.0", "1e-07", "1e+16".
std::string python_float_repr(double d);
// Python's repr(str): quotes, and escapes for backslashes, quotes and control characters.
std::string python_string_repr(std::string_view s);

// Python's ordering (<) for numbers, strings and lists; anything else is an error that names
// the two types.
bool value_less(const Value& a, const Value& b);

// UTF-8 helpers: strings index and count by code point, like Python str.
size_t utf8_char_count(std::string_view s);
std::vector<std::string_view> utf8_split_chars(std::string_view s);

}  // namespace qtrain::engine::text
