// Reading a component's fields from tokenizer.json with errors that name the place: the
// allowed keys are listed, so an option qtrain does not implement is an error, not a silent
// difference from HF.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "engine/text/text_error.h"

namespace qtrain::engine::text {

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

// An integer field takes only a JSON integer within T's range: nlohmann converts a float such as
// 2.2e55 to an int with undefined behaviour, and a too large integer wraps (found by
// fuzz/tokenizer_fuzz).
template <typename T>
T field(const nlohmann::json& j, const char* key, const JsonSite& site, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                      : v.is_number_integer()
                          ? v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) <=
                                                             static_cast<uint64_t>(std::numeric_limits<T>::max()))
                          : false;
    if (!fits) {
      fail(site.key(key),
           "expected an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
               std::to_string(std::numeric_limits<T>::max()) + ", got " + v.dump());
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
