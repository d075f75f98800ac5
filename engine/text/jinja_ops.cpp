// See jinja_ops.h.
#include "engine/text/jinja_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "engine/text/jinja_args.h"
#include "engine/text/jinja_pystr.h"

namespace qtrain::engine::text {

using namespace jinja_detail;

namespace {

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = need_string(a, prefix ? "the argument of startswith()" : "the argument of endswith()");
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  }
  return one(affix);
}

Value string_list(const std::vector<std::string>& parts) {
  List items;
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::list(std::move(items));
}

// A bound method of a str: Undefined when Python's str has no such method in our subset.
Value string_method(const Value& self, const std::string& name) {
  const std::string s = self.as_string();
  using Fn = std::function<Value(CallArgs&)>;
  auto method = [&](Fn fn) { return Value::function("str." + name, std::move(fn)); };
  const std::string what = "str." + name + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const char which = name[0] == 's' ? 'b' : name[0];
    return method([s, which, what](CallArgs& a) {
      Args args(what, a);
      Value chars = args.get(0, "chars", Value::none());
      args.done(1);
      return Value::string(python_strip(s, chars, which));
    });
  }
  if (name == "split") {
    return method([s, what](CallArgs& a) {
      Args args(what, a);
      Value sep = args.get(0, "sep", Value::none());
      const int64_t maxsplit = need_int(args.get(1, "maxsplit", Value::integer(-1)), "maxsplit");
      args.done(2);
      return string_list(python_split(s, sep, maxsplit));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name[0] == 's';
    return method([s, prefix, what](CallArgs& a) {
      Args args(what, a);
      Value affix = args.get(0, prefix ? "prefix" : "suffix");
      args.done(1);
      return Value::boolean(affix_matches(s, affix, prefix));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method([s, name, what](CallArgs& a) {
      Args(what, a).done(0);
      if (name == "upper") return Value::string(python_upper(s));
      if (name == "lower") return Value::string(python_lower(s));
      if (name == "title") return Value::string(python_title(s));
      return Value::string(python_capitalize(s));
    });
  }
  if (name == "replace") {
    return method([s, what](CallArgs& a) {
      Args args(what, a);
      const std::string& old = need_string(args.get(0, "old"), "the first argument of replace()");
      const std::string& with = need_string(args.get(1, "new"), "the second argument of replace()");
      const int64_t count = need_int(args.get(2, "count", Value::integer(-1)), "count");
      args.done(3);
      return Value::string(python_replace(s, old, with, count));
    });
  }
  if (name == "find" || name == "count") {
    return method([s, name, what](CallArgs& a) {
      Args args(what, a);
      const std::string& sub = need_string(args.get(0, "sub"), "the argument of " + what);
      args.done(1);
      if (name == "find") {
        const size_t hit = s.find(sub);
        return Value::integer(hit == std::string::npos ? -1 : static_cast<int64_t>(utf8_char_count(s.substr(0, hit))));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_char_count(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return method([s, what](CallArgs& a) {
      Args args(what, a);
      Value items = args.get(0, "iterable");
      args.done(1);
      std::string out;
      bool first = true;
      for (const Value& v : iterate(items)) {
        if (!first) out += s;
        first = false;
        out += need_string(v, "each item joined by str.join()");
      }
      return Value::string(out);
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
  const std::string what = "dict." + name + "()";
  if (name == "get") {
    return Value::function(what, [self, what](CallArgs& a) {
      Args args(what, a);
      Value key = args.get(0, "key");
      Value fallback = args.get(1, "default", Value::none());
      args.done(2);
      if (!key.is_string()) return fallback;
      const Value* v = self.as_dict().find(key.as_string());
      return v != nullptr ? *v : fallback;
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(what, [self, name, what](CallArgs& a) {
      Args(what, a).done(0);
      List out;
      for (const auto& [k, v] : self.as_dict().items) {
        if (name == "items") {
          out.push_back(Value::tuple({Value::string(k), v}));
        } else {
          out.push_back(name == "keys" ? Value::string(k) : v);
        }
      }
      return Value::list(std::move(out));
    });
  }
  return Value();
}

int64_t python_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value checked_int(__int128 r, const std::string& op) {
  if (r > std::numeric_limits<int64_t>::max() || r < std::numeric_limits<int64_t>::min()) {
    fail("integer overflow in '" + op + "' (chat templates compute with 64-bit integers)");
  }
  return Value::integer(static_cast<int64_t>(r));
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(out);
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// Python slice bounds for a sequence of length n (PySlice_AdjustIndices).
void slice_indices(
    int64_t n, const Value& start, const Value& stop, const Value& step, int64_t& b, int64_t& e, int64_t& s) {
  auto absent = [](const Value& v) { return v.is_none() || v.is_undefined(); };
  s = absent(step) ? 1 : need_int(step, "a slice step");
  if (s == 0) fail("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t fallback) {
    if (absent(v)) return fallback;
    int64_t i = need_int(v, "a slice bound");
    if (i < 0) {
      i += n;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= n) {
      i = s < 0 ? n - 1 : n;
    }
    return i;
  };
  b = adjust(start, s < 0 ? n - 1 : 0);
  e = adjust(stop, s < 0 ? -1 : n);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::undefined:
      fail_undefined(obj);
    case Value::Kind::string:
      return string_method(obj, name);
    case Value::Kind::dict: {
      if (obj.is_dict()) {
        Value m = dict_method(obj, name);
        if (!m.is_undefined()) return m;
      }
      const Value* v = obj.as_dict().find(name);
      if (v != nullptr) return *v;
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
    }
    default:
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.kind() == Value::Kind::dict) {
    if (key.is_string()) {
      const Value* v = obj.as_dict().find(key.as_string());
      if (v != nullptr) return *v;
      return get_attr(obj, key.as_string());
    }
    return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(obj.type_name() + " index " + key.repr() + " out of range");
      return obj.as_list()[static_cast<size_t>(i)];
    }
    const auto chars = utf8_split_chars(obj.as_string());
    const auto n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index " + key.repr() + " out of range");
    return Value::string(std::string(chars[static_cast<size_t>(i)]));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + " object' has no item " + key.repr());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string()) fail("'" + obj.type_name() + "' object cannot be sliced");
  std::vector<std::string_view> chars;
  if (obj.is_string()) chars = utf8_split_chars(obj.as_string());
  const int64_t n = obj.is_string() ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(obj.as_list().size());
  int64_t b, e, s;
  slice_indices(n, start, stop, step, b, e, s);
  std::vector<int64_t> picks;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s) picks.push_back(i);
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : picks) out += chars[static_cast<size_t>(i)];
    return Value::string(out);
  }
  List out;
  for (int64_t i : picks) out.push_back(obj.as_list()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(a.str() + b.str());
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return checked_int(static_cast<__int128>(a.as_int()) + b.as_int(), op);
    if (numbers) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return checked_int(static_cast<__int128>(a.as_int()) - b.as_int(), op);
    if (numbers) return Value::floating(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return checked_int(static_cast<__int128>(a.as_int()) * b.as_int(), op);
    if (numbers) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    unsupported(op, a, b);
  }
  if (!numbers) {
    if (op == "%" && a.is_string()) fail("printf-style string formatting ('%' on a string) is not supported");
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (b.as_double() == 0.0) fail("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0.0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      const int64_t q = python_floordiv(a.as_int(), b.as_int());
      return op == "//" ? Value::integer(q) : Value::integer(a.as_int() - q * b.as_int());
    }
    const double x = a.as_double(), y = b.as_double();
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (op == "%") return Value::floating(m);
    return Value::floating(std::floor((x - m) / y + 0.5));  // exact: x - m is a multiple of y
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      __int128 r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) {
        r *= a.as_int();
        if (r > std::numeric_limits<int64_t>::max() || r < std::numeric_limits<int64_t>::min()) checked_int(r, op);
      }
      return Value::integer(static_cast<int64_t>(r));
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  fail("unknown operator '" + op + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::string:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::list:
      return std::any_of(
          container.as_list().begin(), container.as_list().end(), [&](const Value& v) { return v == item; });
    case Value::Kind::dict:
      if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
      [[fallthrough]];
    default:
      fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return v.as_list();
    case Value::Kind::string: {
      List out;
      for (auto c : utf8_split_chars(v.as_string())) out.push_back(Value::string(std::string(c)));
      return out;
    }
    case Value::Kind::dict:
      if (v.is_dict()) {
        List out;
        for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::string(k));
        return out;
      }
      [[fallthrough]];
    default:
      fail("'" + v.type_name() + "' object is not iterable");
  }
}

}  // namespace qtrain::engine::text
