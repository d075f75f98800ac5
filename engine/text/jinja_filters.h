// The filters (`x | tojson`) and tests (`x is string`) of transformers' chat-template
// environment, with jinja2 3.1's semantics; transformers' own `tojson` (see Note [tojson is
// json.dumps]). Errors are JinjaRuntimeError; the renderer adds where they happened.
#pragma once

#include <string>

#include "engine/text/jinja_value.h"

namespace qtrain::engine::text {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

}  // namespace qtrain::engine::text
