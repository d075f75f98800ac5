// See user_defined_type.h and Note [User-defined type] there.
#include "engine/data/user_defined_type.h"

#include <c10/util/Exception.h>

#include <map>

namespace qtrain::engine::data {
namespace {

// The text of row[field], which `key` of the type names.
std::string field_text(const nlohmann::ordered_json& row,
                       const std::string& field,
                       const std::string& key,
                       const std::string& where) {
  const auto it = row.find(field);
  TORCH_CHECK(it != row.end() && it->is_string(),
              where,
              ": the user-defined type reads the text of \"",
              field,
              "\" (",
              key,
              "), and the row ",
              it == row.end() ? std::string("has no such field") : "holds a " + std::string(it->type_name()) + " there",
              "; set ",
              key,
              " to the row's key of that text");
  return it->get<std::string>();
}

// Python's str.format(**values) of `format`, which `key` of the type gives: {name} replaced,
// {{ and }} braces. `fills` names the placeholders the key fills; `absent` says why one of them
// is not in `values`.
std::string python_format(const std::string& format,
                          const std::map<std::string, std::string>& values,
                          const std::string& fills,
                          const std::string& absent,
                          const std::string& key,
                          const std::string& where) {
  const auto refuse = [&](const std::string& problem) {
    TORCH_CHECK(false, where, ": ", key, " \"", format, "\" ", problem);
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    const char ch = format[i];
    if (ch == '}') {
      if (i + 1 == format.size() || format[i + 1] != '}') refuse("has a single '}' (write }} for a brace)");
      out += '}';
      ++i;
    } else if (ch != '{') {
      out += ch;
    } else if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
    } else {
      const auto close = format.find('}', i);
      if (close == std::string::npos) refuse("has a '{' without its '}'");
      const std::string name = format.substr(i + 1, close - i - 1);
      if (name.find_first_of("!:[.{") != std::string::npos) {
        refuse("has {" + name +
               "}: conversions, format specs, indexing and attributes are not supported; write the bare name");
      }
      const auto it = values.find(name);
      if (it == values.end() && fills.find("{" + name + "}") != std::string::npos) {
        refuse("names {" + name + "}, " + absent);
      }
      if (it == values.end()) refuse("names {" + name + "}; it fills " + fills + ", so write the format with those");
      out += it->second;
      i = close;
    }
  }
  return out;
}

}  // namespace

nlohmann::ordered_json user_defined_row(const config::UserDefinedType& u,
                                        const nlohmann::ordered_json& row,
                                        bool kto,
                                        const std::string& where) {
  std::map<std::string, std::string> prompt_values = {
      {"prompt", field_text(row, u.field_prompt, "field_prompt", where)}};
  const std::string prompt_format = u.prompt_format.empty() ? "{prompt}" : u.prompt_format;
  // The system text only where the format asks for it and the row has one (Python's truthiness).
  if (const auto it = row.find(u.field_system); prompt_format.find("{system}") != std::string::npos &&
                                                it != row.end() && it->is_string() && !it->get<std::string>().empty()) {
    prompt_values["system"] = it->get<std::string>();
  }
  const std::string no_system = "and the row's \"" + u.field_system +
                                "\" (field_system) is absent, empty or not text; give every row a system text, or "
                                "write the format without {system}";
  const auto formatted = [&](const std::string& format, const std::string& name, const std::string& field) {
    return python_format(format.empty() ? "{" + name + "}" : format,
                         {{name, field_text(row, field, "field_" + name, where)}},
                         "{" + name + "}",
                         "",
                         name + "_format",
                         where);
  };
  nlohmann::ordered_json out = {
      {"prompt", python_format(prompt_format, prompt_values, "{prompt}, {system}", no_system, "prompt_format", where)}};
  if (kto) {
    out["completion"] = formatted(u.completion_format, "completion", u.field_completion);
    const auto label = row.find(u.field_label);
    TORCH_CHECK(label != row.end(),
                where,
                ": the row has no \"",
                u.field_label,
                "\" (field_label), KTO's label (true: desirable, false: undesirable); set field_label to the row's "
                "key of that label");
    out["label"] = *label;
  } else {
    out["chosen"] = formatted(u.chosen_format, "chosen", u.field_chosen);
    out["rejected"] = formatted(u.rejected_format, "rejected", u.field_rejected);
  }
  return out;
}

}  // namespace qtrain::engine::data
