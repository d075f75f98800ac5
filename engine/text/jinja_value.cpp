// See jinja_value.h.
#include "engine/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/text/jinja_error.h"

namespace qtrain::engine::text {

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.b_ = b;
  v.i_ = b ? 1 : 0;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::integer;
  v.i_ = i;
  return v;
}
Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::floating;
  v.d_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::list;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::dict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}
Value Value::namespace_object() {
  Value v = dict();
  v.namespace_ = true;
  return v;
}
Value Value::function(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::callable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        throw JinjaRuntimeError("the integer " + std::to_string(u) + " does not fit in 64 bits");
      }
      return integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = dict();
      for (const auto& [k, e] : j.items()) d.as_dict().set(k, from_json(e));
      return d;
    }
    default:
      throw JinjaRuntimeError("chat template data cannot hold a JSON value of type " + std::string(j.type_name()));
  }
}

double Value::as_double() const {
  return kind_ == Kind::floating ? d_ : static_cast<double>(i_);
}

const std::string& Value::undefined_hint() const {
  static const std::string unnamed = "a value is undefined";
  return s_ ? *s_ : unnamed;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return b_;
    case Kind::integer:
      return i_ != 0;
    case Kind::floating:
      return d_ != 0.0;
    case Kind::string:
      return !s_->empty();
    case Kind::list:
      return !list_->empty();
    case Kind::dict:
      return namespace_ || !dict_->items.empty();
    case Kind::callable:
      return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::undefined:
      return "";
    case Kind::string:
      return *s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::undefined:
      return "";
    case Kind::none:
      return "None";
    case Kind::boolean:
      return b_ ? "True" : "False";
    case Kind::integer:
      return std::to_string(i_);
    case Kind::floating:
      return python_float_repr(d_);
    case Kind::string:
      return python_string_repr(*s_);
    case Kind::list: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::dict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += python_string_repr(k) + ": " + v.repr();
      }
      out += namespace_ ? "}>" : "}";
      return out;
    }
    case Kind::callable:
      return "<function " + fn_->name + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return tuple_ ? "tuple" : "list";
    case Kind::dict:
      return namespace_ ? "Namespace" : "dict";
    case Kind::callable:
      return "function";
  }
  return "?";
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::none:
      return nullptr;
    case Kind::boolean:
      return b_;
    case Kind::integer:
      return i_;
    case Kind::floating:
      return d_;
    case Kind::string:
      return *s_;
    case Kind::list: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& v : *list_) out.push_back(v.to_json());
      return out;
    }
    case Kind::dict: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : dict_->items) out[k] = v.to_json();
      return out;
    }
    default:
      throw JinjaRuntimeError("Object of type " + type_name() + " is not JSON serializable");
  }
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return *a.s_ == *b.s_;
    case Value::Kind::list:
      if (a.tuple_ != b.tuple_ || a.list_->size() != b.list_->size()) return false;
      for (size_t i = 0; i < a.list_->size(); ++i) {
        if (!((*a.list_)[i] == (*b.list_)[i])) return false;
      }
      return true;
    case Value::Kind::dict:
      if (a.namespace_ || b.namespace_) return a.dict_ == b.dict_;
      if (a.dict_->items.size() != b.dict_->items.size()) return false;
      for (const auto& [k, v] : a.dict_->items) {
        const Value* other = b.dict_->find(k);
        if (other == nullptr || !(v == *other)) return false;
      }
      return true;
    case Value::Kind::callable:
      return a.fn_ == b.fn_;
    default:
      return false;
  }
}

bool Value::same_as(const Value& other) const {
  if (kind_ == Kind::list && other.kind_ == Kind::list) return list_ == other.list_;
  if (kind_ == Kind::dict && other.kind_ == Kind::dict) return dict_ == other.dict_;
  if (kind_ != other.kind_) return false;
  return *this == other;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then Python's layout: scientific when the
  // decimal exponent is < -4 or >= 16, else positional with at least one digit after the point.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t int_digits = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_digits) {
      out = digits + std::string(int_digits - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_digits) + "." + digits.substr(int_digits);
    }
  }
  return negative ? "-" + out : out;
}

std::string python_string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

namespace {
int rank(const Value& v) {
  if (v.is_number()) return 0;
  if (v.is_string()) return 1;
  if (v.is_list()) return 2;
  return -1;
}
}  // namespace

bool value_less(const Value& a, const Value& b) {
  const int ra = rank(a);
  if (ra < 0 || ra != rank(b)) {
    throw JinjaRuntimeError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
                            "'");
  }
  if (ra == 0) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (ra == 1) return a.as_string() < b.as_string();  // UTF-8 byte order is code point order
  const List& x = a.as_list();
  const List& y = b.as_list();
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (value_less(x[i], y[i])) return true;
    if (value_less(y[i], x[i])) return false;
  }
  return x.size() < y.size();
}

size_t utf8_char_count(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string_view> utf8_split_chars(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i + 1;
    while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace qtrain::engine::text
