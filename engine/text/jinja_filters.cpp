// See jinja_filters.h.
#include "engine/text/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/text/jinja_args.h"
#include "engine/text/jinja_ops.h"
#include "engine/text/jinja_pystr.h"
#include "engine/text/jinja_tojson.h"

namespace qtrain::engine::text {

using namespace jinja_detail;

namespace {

// `a.b.c` (and `a.0`) as map/selectattr/sort take it, through get_item like jinja2's getitem.
Value lookup_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    if (cur.is_undefined()) return cur;
    cur = get_item(cur, numeric ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// The test named by args[first] (with the rest as its arguments), applied to v.
bool run_named_test(const Value& v, const std::vector<Value>& positional, size_t first, const std::string& who) {
  if (positional.size() <= first) return v.truthy();
  const std::string& test = need_string(positional[first], "the test name given to " + who);
  if (!has_test(test)) fail(who + ": no test named '" + test + "'");
  CallArgs targs;
  targs.positional.assign(positional.begin() + static_cast<long>(first) + 1, positional.end());
  return apply_test(test, v, targs);
}

Value length_of(const Value& v) {
  if (v.is_undefined()) return Value::integer(0);
  if (v.is_string()) return Value::integer(static_cast<int64_t>(utf8_char_count(v.as_string())));
  if (v.is_list()) return Value::integer(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
  fail("object of type '" + v.type_name() + "' has no len()");
}

using FilterFn = Value (*)(const Value&, Args&);

Value f_length(const Value& v, Args& a) {
  a.done(0);
  return length_of(v);
}

Value f_tojson(const Value& v, Args& a) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonDumpOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value indent = a.get(1, "indent", Value::none());
  if (indent.is_int()) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    fail("tojson: indent must be an integer or a string, not " + indent.type_name());
  }
  const Value separators = a.get(2, "separators", Value::none());
  if (separators.is_list() && separators.as_list().size() == 2) {
    o.separators = std::make_pair(need_string(separators.as_list()[0], "tojson separators"),
                                  need_string(separators.as_list()[1], "tojson separators"));
  } else if (!separators.is_none() && !separators.is_undefined()) {
    fail("tojson: separators must be a pair of strings");
  }
  o.sort_keys = a.get(3, "sort_keys", Value::boolean(false)).truthy();
  a.done(4);
  return Value::string(json_dumps(v, o));
}

Value f_string(const Value& v, Args& a) {
  a.done(0);
  return Value::string(v.str());
}

Value f_trim(const Value& v, Args& a) {
  Value chars = a.get(0, "chars", Value::none());
  a.done(1);
  return Value::string(python_strip(v.str(), chars, 'b'));
}

Value f_lower(const Value& v, Args& a) {
  a.done(0);
  return Value::string(python_lower(v.str()));
}
Value f_upper(const Value& v, Args& a) {
  a.done(0);
  return Value::string(python_upper(v.str()));
}
Value f_title(const Value& v, Args& a) {
  a.done(0);
  return Value::string(jinja_title(v.str()));
}
Value f_capitalize(const Value& v, Args& a) {
  a.done(0);
  return Value::string(python_capitalize(v.str()));
}
Value f_safe(const Value& v, Args& a) {
  a.done(0);
  return v;
}

Value f_list(const Value& v, Args& a) {
  a.done(0);
  return Value::list(iterate(v));
}

Value f_join(const Value& v, Args& a) {
  const Value sep = a.get(0, "d", Value::string(""));
  const Value attribute = a.get(1, "attribute", Value::none());
  a.done(2);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep.str();
    first = false;
    out += (attribute.is_none() ? item : lookup_path(item, attribute.str())).str();
  }
  return Value::string(out);
}

Value f_first(const Value& v, Args& a) {
  a.done(0);
  List items = iterate(v);
  return items.empty() ? Value::undefined("first: the sequence is empty") : items.front();
}
Value f_last(const Value& v, Args& a) {
  a.done(0);
  List items = iterate(v);
  return items.empty() ? Value::undefined("last: the sequence is empty") : items.back();
}

Value f_default(const Value& v, Args& a) {
  const Value fallback = a.get(0, "default_value", Value::string(""));
  const bool boolean = a.get(1, "boolean", Value::boolean(false)).truthy();
  a.done(2);
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value f_items(const Value& v, Args& a) {
  a.done(0);
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) fail("items: expected a dict, got " + v.type_name());
  List out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::tuple({Value::string(k), x}));
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& v, Args& a) {
  const bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const std::string by = a.get(1, "by", Value::string("key")).str();
  const bool reverse = a.get(2, "reverse", Value::boolean(false)).truthy();
  a.done(3);
  if (!v.is_dict()) fail("dictsort: expected a dict, got " + v.type_name());
  if (by != "key" && by != "value") fail("dictsort: 'by' must be 'key' or 'value', not '" + by + "'");
  List out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::tuple({Value::string(k), x}));
  const size_t index = by == "key" ? 0 : 1;
  auto sort_key = [&](const Value& item) {
    const Value& x = item.as_list()[index];
    return x.is_string() && !case_sensitive ? Value::string(python_lower(x.as_string())) : x;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
    return reverse ? value_less(sort_key(y), sort_key(x)) : value_less(sort_key(x), sort_key(y));
  });
  return Value::list(std::move(out));
}

// Python's float(s) for a stripped string: decimal notation, "inf"/"nan", '_' between digits;
// not C's hexadecimal floats.
bool parse_python_float(const std::string& s, double& out) {
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return false;
    const bool between_digits = c == '_' && i > 0 && i + 1 < s.size() &&
                                std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(s[i + 1]));
    if (!between_digits) digits += c;
  }
  try {
    size_t used = 0;
    out = std::stod(digits, &used);
    return used == digits.size() && !digits.empty();
  } catch (const std::exception&) {
    return false;
  }
}

Value f_int(const Value& v, Args& a) {
  const Value fallback = a.get(0, "default", Value::integer(0));
  const int64_t base = need_int(a.get(1, "base", Value::integer(10)), "base");
  a.done(2);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) return fallback;
    return Value::integer(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    const std::string s = python_strip(v.as_string(), Value::none(), 'b');
    try {
      size_t used = 0;
      const int64_t i = std::stoll(s, &used, static_cast<int>(base));
      if (used == s.size()) return Value::integer(i);
    } catch (const std::exception&) {
    }
    double d = 0;
    if (parse_python_float(s, d) && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
  }
  return fallback;
}

Value f_float(const Value& v, Args& a) {
  const Value fallback = a.get(0, "default", Value::floating(0.0));
  a.done(1);
  if (v.is_number()) return Value::floating(v.as_double());
  double d = 0;
  if (v.is_string() && parse_python_float(python_strip(v.as_string(), Value::none(), 'b'), d)) {
    return Value::floating(d);
  }
  return fallback;
}

Value f_abs(const Value& v, Args& a) {
  a.done(0);
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return Value::integer(std::llabs(v.as_int()));
  fail("abs: bad operand type '" + v.type_name() + "'");
}

Value f_replace(const Value& v, Args& a) {
  const std::string old = a.get(0, "old").str();
  const std::string with = a.get(1, "new").str();
  const Value count = a.get(2, "count", Value::none());
  a.done(3);
  return Value::string(python_replace(v.str(), old, with, count.is_none() ? -1 : need_int(count, "count")));
}

Value f_reverse(const Value& v, Args& a) {
  a.done(0);
  if (v.is_string()) {
    auto chars = utf8_split_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::string(out);
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(const Value& v, Args& a) {
  const bool reverse = a.get(0, "reverse", Value::boolean(false)).truthy();
  const bool case_sensitive = a.get(1, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = a.get(2, "attribute", Value::none());
  a.done(3);
  List items = iterate(v);
  auto key = [&](const Value& item) {
    Value x = attribute.is_none() ? item : lookup_path(item, attribute.str());
    return x.is_string() && !case_sensitive ? Value::string(python_lower(x.as_string())) : x;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? value_less(key(y), key(x)) : value_less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_unique(const Value& v, Args& a) {
  a.done(0);
  List out;
  for (const Value& x : iterate(v)) {
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return x == y; })) out.push_back(x);
  }
  return Value::list(std::move(out));
}

// map, select, reject, selectattr and rejectattr yield nothing for a false value (jinja2 guards
// them with `if value:`), so `none | selectattr(...)` is an empty list, not an error.
List iterate_if_true(const Value& v) {
  return v.truthy() ? iterate(v) : List{};
}

Value f_map(const Value& v, Args& a) {
  List out;
  if (a.has(9999, "attribute")) {
    const std::string attribute = a.get(9999, "attribute").str();
    const Value fallback = a.get(9999, "default");
    a.done(0);
    for (const Value& item : iterate_if_true(v)) {
      Value x = lookup_path(item, attribute);
      out.push_back(x.is_undefined() && a.has(9999, "default") ? fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional().empty()) fail("map: give a filter name or attribute=...");
  const std::string& filter = need_string(a.positional()[0], "the filter name given to map");
  if (!has_filter(filter)) fail("map: no filter named '" + filter + "'");
  for (const Value& item : iterate_if_true(v)) {
    CallArgs fargs;
    fargs.positional.assign(a.positional().begin() + 1, a.positional().end());
    out.push_back(apply_filter(filter, item, fargs));
  }
  return Value::list(std::move(out));
}

Value select_impl(const Value& v, Args& a, bool by_attribute, bool keep) {
  const std::string who = std::string(keep ? "select" : "reject") + (by_attribute ? "attr" : "");
  List out;
  const auto& positional = a.positional();
  if (by_attribute && positional.empty()) fail(who + ": give the attribute name");
  for (const Value& item : iterate_if_true(v)) {
    const Value subject = by_attribute ? lookup_path(item, positional[0].str()) : item;
    if (run_named_test(subject, positional, by_attribute ? 1 : 0, who) == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, Args& a) {
  return select_impl(v, a, false, true);
}
Value f_reject(const Value& v, Args& a) {
  return select_impl(v, a, false, false);
}
Value f_selectattr(const Value& v, Args& a) {
  return select_impl(v, a, true, true);
}
Value f_rejectattr(const Value& v, Args& a) {
  return select_impl(v, a, true, false);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"abs", f_abs},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"first", f_first},
      {"float", f_float},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
  };
  return table;
}

using TestFn = bool (*)(const Value&, const std::vector<Value>&);

const Value& test_arg(const std::vector<Value>& args, const char* test) {
  if (args.empty()) fail(std::string("the test '") + test + "' needs an argument");
  return args[0];
}

bool compare_test(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a == b;
  if (op == "!=") return !(a == b);
  if (op == "<") return value_less(a, b);
  if (op == "<=") return !value_less(b, a);
  if (op == ">") return value_less(b, a);
  return !value_less(a, b);
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"boolean", [](const Value& v, const std::vector<Value>&) { return v.is_bool(); }},
      {"callable", [](const Value& v, const std::vector<Value>&) { return v.is_callable() || v.is_undefined(); }},
      {"defined", [](const Value& v, const std::vector<Value>&) { return !v.is_undefined(); }},
      {"divisibleby",
       [](const Value& v, const std::vector<Value>& a) {
         const int64_t d = need_int(test_arg(a, "divisibleby"), "divisibleby");
         if (d == 0) fail("divisibleby: division by zero");
         return need_int(v, "the value tested with divisibleby") % d == 0;
       }},
      {"eq", [](const Value& v, const std::vector<Value>& a) { return v == test_arg(a, "eq"); }},
      {"equalto", [](const Value& v, const std::vector<Value>& a) { return v == test_arg(a, "equalto"); }},
      {"==", [](const Value& v, const std::vector<Value>& a) { return v == test_arg(a, "=="); }},
      {"even",
       [](const Value& v, const std::vector<Value>&) { return need_int(v, "the value tested with even") % 2 == 0; }},
      {"false", [](const Value& v, const std::vector<Value>&) { return v.is_bool() && !v.as_bool(); }},
      {"float", [](const Value& v, const std::vector<Value>&) { return v.is_float(); }},
      {"ge", [](const Value& v, const std::vector<Value>& a) { return compare_test(">=", v, test_arg(a, "ge")); }},
      {">=", [](const Value& v, const std::vector<Value>& a) { return compare_test(">=", v, test_arg(a, ">=")); }},
      {"gt", [](const Value& v, const std::vector<Value>& a) { return compare_test(">", v, test_arg(a, "gt")); }},
      {">", [](const Value& v, const std::vector<Value>& a) { return compare_test(">", v, test_arg(a, ">")); }},
      {"greaterthan",
       [](const Value& v, const std::vector<Value>& a) { return compare_test(">", v, test_arg(a, "greaterthan")); }},
      {"in", [](const Value& v, const std::vector<Value>& a) { return contains(test_arg(a, "in"), v); }},
      {"integer", [](const Value& v, const std::vector<Value>&) { return v.is_int(); }},
      {"iterable",
       [](const Value& v, const std::vector<Value>&) {
         return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
       }},
      {"le", [](const Value& v, const std::vector<Value>& a) { return compare_test("<=", v, test_arg(a, "le")); }},
      {"<=", [](const Value& v, const std::vector<Value>& a) { return compare_test("<=", v, test_arg(a, "<=")); }},
      {"lower", [](const Value& v, const std::vector<Value>&) { return python_is_case(v.str(), true); }},
      {"lt", [](const Value& v, const std::vector<Value>& a) { return compare_test("<", v, test_arg(a, "lt")); }},
      {"<", [](const Value& v, const std::vector<Value>& a) { return compare_test("<", v, test_arg(a, "<")); }},
      {"lessthan",
       [](const Value& v, const std::vector<Value>& a) { return compare_test("<", v, test_arg(a, "lessthan")); }},
      {"mapping", [](const Value& v, const std::vector<Value>&) { return v.is_dict(); }},
      {"ne", [](const Value& v, const std::vector<Value>& a) { return !(v == test_arg(a, "ne")); }},
      {"!=", [](const Value& v, const std::vector<Value>& a) { return !(v == test_arg(a, "!=")); }},
      {"none", [](const Value& v, const std::vector<Value>&) { return v.is_none(); }},
      {"number", [](const Value& v, const std::vector<Value>&) { return v.is_number(); }},
      {"odd",
       [](const Value& v, const std::vector<Value>&) { return need_int(v, "the value tested with odd") % 2 != 0; }},
      {"sameas", [](const Value& v, const std::vector<Value>& a) { return v.same_as(test_arg(a, "sameas")); }},
      {"sequence",
       [](const Value& v, const std::vector<Value>&) {
         return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
       }},
      {"string", [](const Value& v, const std::vector<Value>&) { return v.is_string(); }},
      {"true", [](const Value& v, const std::vector<Value>&) { return v.is_bool() && v.as_bool(); }},
      {"undefined", [](const Value& v, const std::vector<Value>&) { return v.is_undefined(); }},
      {"upper", [](const Value& v, const std::vector<Value>&) { return python_is_case(v.str(), false); }},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) != 0;
}
bool has_test(const std::string& name) {
  return tests().count(name) != 0;
}

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '" + name + "'");
  Args a("the filter '" + name + "'", args);
  return it->second(subject, a);
}

bool apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail("no test named '" + name + "'");
  if (!args.keyword.empty()) fail("the test '" + name + "' takes no keyword arguments");
  return it->second(subject, args.positional);
}

}  // namespace qtrain::engine::text
