// Argument binding and checks shared by the built-in filters, tests and methods of the
// chat-template engine (an internal header of engine/text/jinja_*).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/text/jinja_error.h"
#include "engine/text/jinja_value.h"

namespace qtrain::engine::text::jinja_detail {

[[noreturn]] inline void fail(const std::string& message) {
  throw JinjaRuntimeError(message);
}

[[noreturn]] inline void fail_undefined(const Value& v) {
  fail(v.undefined_hint());
}

// Positional-or-keyword argument binding, Python style; unknown keywords are an error.
class Args {
 public:
  Args(const std::string& what, CallArgs& args) : what_(what), args_(args) {}
  // Argument `index` (0-based, after the subject) or keyword `name`.
  Value get(size_t index, const std::string& name, Value fallback = Value()) {
    used_.push_back(name);
    if (index < args_.positional.size()) return args_.positional[index];
    for (const auto& [k, v] : args_.keyword) {
      if (k == name) return v;
    }
    return fallback;
  }
  bool has(size_t index, const std::string& name) const {
    if (index < args_.positional.size()) return true;
    for (const auto& [k, v] : args_.keyword) {
      if (k == name) return true;
    }
    return false;
  }
  const std::vector<Value>& positional() const { return args_.positional; }
  // Every keyword was one this function takes, and at most `max_positional` positionals.
  void done(size_t max_positional) const {
    if (args_.positional.size() > max_positional) {
      fail(what_ + " takes at most " + std::to_string(max_positional) + " argument(s), " +
           std::to_string(args_.positional.size()) + " were given");
    }
    for (const auto& [k, v] : args_.keyword) {
      if (std::find(used_.begin(), used_.end(), k) == used_.end()) {
        fail(what_ + " got an unexpected keyword argument '" + k + "'");
      }
    }
  }

 private:
  std::string what_;
  CallArgs& args_;
  std::vector<std::string> used_;
};

inline const std::string& need_string(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail(what + " must be a string, not " + v.type_name());
  return v.as_string();
}

inline int64_t need_int(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) fail(what + " must be an integer, not " + v.type_name());
  return v.as_int();
}

}  // namespace qtrain::engine::text::jinja_detail
