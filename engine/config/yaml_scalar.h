// The scalar values of a run config as axolotl reads them (PyYAML, then pydantic): booleans,
// integers and numbers from their text, the shortest text of a double for writing, the values
// that ask for nothing, and the ranges a number is checked against.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}  // namespace YAML

namespace qtrain::engine::config {

// The YAML 1.1 booleans, as PyYAML (and so axolotl) reads them.
std::optional<bool> parse_bool(const std::string& s);

std::optional<int64_t> parse_int(const std::string& s);

// Decimal and exponent forms, including `2e-4`, which PyYAML leaves a string but axolotl (through
// pydantic) reads as a number. Infinities and NaN are refused.
std::optional<double> parse_double(const std::string& s);

// The shortest text that reads back to the same double.
std::string format_double(double v);

// What to_yaml writes: a YAML double-quoted string (the one form that never reads back as a
// number, bool or null), true / false, and a flow list of quoted strings.
std::string yaml_quoted(const std::string& s);
std::string yaml_bool(bool v);
std::string yaml_list(const std::vector<std::string>& items);
// A flow list of numbers, each as format_double writes it.
std::string yaml_numbers(const std::vector<double>& items);

// A value that asks for nothing: see Note [Recognised axolotl keys].
bool is_off(const YAML::Node& v);

// A value below lo (or at an open lo) or above hi (or at an open hi) is out of range.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string problem(const std::string& value) const;
};

Range at_least(double lo);
Range above(double lo);
Range unit_interval_open();
// [lo, hi], or (lo, hi] with lo_open.
Range between(double lo, double hi, bool lo_open = false);

}  // namespace qtrain::engine::config
