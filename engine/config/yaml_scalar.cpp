// See yaml_scalar.h.
#include "engine/config/yaml_scalar.h"

#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <set>

namespace qtrain::engine::config {

std::optional<bool> parse_bool(const std::string& s) {
  static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  if (yes.contains(s)) {
    return true;
  }
  if (no.contains(s)) {
    return false;
  }
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (end - begin >= 2 && *begin == '+' && begin[1] != '-') {
    ++begin;
  }
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end || begin == end) {
    return std::nullopt;
  }
  return v;
}

std::optional<double> parse_double(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (end - begin >= 2 && *begin == '+' && begin[1] != '-') {
    ++begin;
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end || begin == end || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::string format_double(double v) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  TORCH_INTERNAL_ASSERT(ec == std::errc());
  return std::string(buffer, ptr);
}

bool is_off(const YAML::Node& v) {
  if (v.IsNull()) {
    return true;
  }
  if (v.IsScalar()) {
    return v.Scalar().empty() || parse_bool(v.Scalar()) == false;
  }
  return v.size() == 0;
}

namespace {

// A whole bound as digits (1000000000, not 1e+09), since most ranges bound integer keys.
std::string bound_text(double v) {
  return std::floor(v) == v && std::abs(v) < 1e15 ? std::to_string(static_cast<int64_t>(v)) : format_double(v);
}

}  // namespace

std::string Range::problem(const std::string& value) const {
  if (std::isinf(hi)) {
    return value + " must be " + (lo_open ? "> " : ">= ") + bound_text(lo);
  }
  return value + " is outside " + (lo_open ? "(" : "[") + bound_text(lo) + ", " + bound_text(hi) +
         (hi_open ? ")" : "]");
}

Range at_least(double lo) {
  return Range{.lo = lo};
}
Range above(double lo) {
  return Range{.lo = lo, .lo_open = true};
}
Range unit_interval_open() {
  return Range{.lo = 0, .hi = 1, .hi_open = true};
}
Range between(double lo, double hi, bool lo_open) {
  return Range{.lo = lo, .hi = hi, .lo_open = lo_open};
}

std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string yaml_bool(bool v) {
  return v ? "true" : "false";
}

std::string yaml_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : ", ") + yaml_quoted(items[i]);
  return out + "]";
}

std::string yaml_numbers(const std::vector<double>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : ", ") + format_double(items[i]);
  return out + "]";
}

}  // namespace qtrain::engine::config
