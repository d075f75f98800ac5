// Reading a component's fields from tokenizer.json with errors that name the place: the
// allowed keys are listed, so an option qtrain does not implement is an error, not a silent
// difference from HF.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/text/text_error.h"

namespace qtrain::engine::text {

// A token name in tokenizer_config.json: a string, or an AddedToken object with "content".
inline std::optional<std::string> token_name(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (j[key].is_string()) return j[key].get<std::string>();
  if (j[key].is_object() && j[key].contains("content") && j[key]["content"].is_string()) {
    return j[key]["content"].get<std::string>();
  }
  return std::nullopt;
}

// Every key of the object `j` must be "type" or one of `allowed`.
inline void check_keys(const nlohmann::json& j, const JsonSite& site, std::initializer_list<const char*> allowed) {
  if (!j.is_object()) fail(site, "expected a JSON object, got " + j.dump());
  for (const auto& [k, v] : j.items()) {
    if (k == "type") continue;
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      fail(site.key(k),
           "option '" + k + "' of " + j.value("type", std::string("this component")) +
               " is not supported by qtrain (supported: " + (list.empty() ? "none" : list) +
               "); remove it if it is a no-op, or use a tokenizer without it");
    }
  }
}

// Whether `v` is a JSON integer within T's range: nlohmann converts a float such as 2.2e55 to an
// int with undefined behaviour, and a too large integer wraps (found by fuzz/tokenizer_fuzz).
template <typename T>
bool integer_fits(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  if (!v.is_number_integer()) return false;
  const int64_t i = v.get<int64_t>();
  return i >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         (i < 0 || static_cast<uint64_t>(i) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
}

template <typename T>
std::string integer_range() {
  return "an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
         std::to_string(std::numeric_limits<T>::max());
}

template <typename T>
struct IsIntegerList : std::false_type {};
template <typename E>
struct IsIntegerList<std::vector<E>> : std::bool_constant<std::is_integral_v<E> && !std::is_same_v<E, bool>> {};

// An integer field, or a list of integers, takes only JSON integers within the type's range (see
// integer_fits; a list's bad element is named by its index, found by fuzz/tokenizer_fuzz too).
template <typename T>
T field(const nlohmann::json& j, const char* key, const JsonSite& site, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!integer_fits<T>(v)) fail(site.key(key), "expected " + integer_range<T>() + ", got " + v.dump());
  } else if constexpr (IsIntegerList<T>::value) {
    using E = typename T::value_type;
    if (!v.is_array()) fail(site.key(key), "expected a list of integers, got " + v.dump().substr(0, 80));
    for (size_t i = 0; i < v.size(); ++i) {
      if (!integer_fits<E>(v[i])) {
        fail(
            site.key(key),
            "element " + std::to_string(i) + ": expected " + integer_range<E>() + ", got " + v[i].dump().substr(0, 80));
      }
    }
  }
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(site.key(key), "unexpected value " + v.dump());
  }
}

template <typename T>
T required_field(const nlohmann::json& j, const char* key, const JsonSite& site) {
  if (!j.contains(key) || j[key].is_null()) fail(site.key(key), "missing");
  return field<T>(j, key, site, T{});
}

inline std::string type_of(const nlohmann::json& j, const JsonSite& site) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) fail(site, "missing \"type\"");
  return j["type"].get<std::string>();
}

}  // namespace qtrain::engine::text
