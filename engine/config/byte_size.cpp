// See byte_size.h.
#include "engine/config/byte_size.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string_view>

namespace qtrain::engine::config {
namespace {

struct Unit {
  const char* name;  // upper case
  double bytes;
};

// Largest first, for format_byte_size.
constexpr std::array<Unit, 8> kUnits = {{{"TIB", 1099511627776.0},
                                         {"TB", 1e12},
                                         {"GIB", 1073741824.0},
                                         {"GB", 1e9},
                                         {"MIB", 1048576.0},
                                         {"MB", 1e6},
                                         {"KIB", 1024.0},
                                         {"KB", 1e3}}};
constexpr double kGiB = 1073741824.0;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A number followed by an optional unit; a missing unit is `bare_unit` bytes. nullopt for
// anything else, negative or not finite.
std::optional<double> parse_scaled(std::string_view text, double bare_unit) {
  text = trim(text);
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + end, value);
  if (end == 0 || ec != std::errc() || ptr != text.data() + end || !std::isfinite(value)) return std::nullopt;
  std::string unit(trim(text.substr(end)));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (unit.empty()) return value * bare_unit;
  if (unit == "B") return value;
  for (const Unit& u : kUnits) {
    if (unit == u.name) return value * u.bytes;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> parse_byte_size(const std::string& text) {
  const auto bytes = parse_scaled(text, kGiB);
  if (!bytes || *bytes >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(std::llround(*bytes));
}

std::string format_byte_size(int64_t bytes) {
  if (bytes == 0) return "0";
  for (const Unit& u : kUnits) {
    const auto unit = static_cast<int64_t>(u.bytes);
    if (bytes % unit == 0) {
      // Mixed case as people write it: GiB, GB, B.
      std::string name = u.name;
      if (name.size() == 3) name[1] = 'i';
      return std::to_string(bytes / unit) + name;
    }
  }
  return std::to_string(bytes) + "B";
}

std::optional<double> parse_bandwidth(const std::string& text) {
  std::string_view t = trim(text);
  if (t.size() >= 2 && (t.substr(t.size() - 2) == "/s" || t.substr(t.size() - 2) == "/S")) {
    t.remove_suffix(2);
  }
  const auto bytes = parse_scaled(t, 1e9);
  if (!bytes || *bytes <= 0) return std::nullopt;
  return bytes;
}

}  // namespace qtrain::engine::config
