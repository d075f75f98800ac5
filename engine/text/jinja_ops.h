// What templates do with values: attribute and item lookup, slicing, the Python operators,
// `in`, iteration, and the methods of str and dict (`s.strip()`, `d.items()`), with jinja2
// 3.1 / Python 3 semantics (see Note [Jinja semantics we reproduce]). Errors are
// JinjaRuntimeError; the renderer adds where in the template they happened.
#pragma once

#include <string>

#include "engine/text/jinja_value.h"

namespace qtrain::engine::text {

// `obj.name`: a dict key, a namespace attribute or a bound str/dict method; Undefined when
// missing (its hint says what was missing). Reading from an Undefined is an error.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: a dict key or a list/str index (negative from the end); Undefined when missing.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` with Python's rules; absent bounds are Undefined or None.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// + - * / // % ** ~ with Python's types and rounding.
Value binary_op(const std::string& op, const Value& a, const Value& b);
// `item in container`.
bool contains(const Value& container, const Value& item);
// The items a `for` loop visits: a list's items, a dict's keys, a string's characters;
// Undefined visits nothing.
List iterate(const Value& v);

}  // namespace qtrain::engine::text
