// See jinja_tojson.h, Note [tojson is json.dumps].
#include "engine/text/jinja_tojson.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/text/jinja_error.h"

namespace qtrain::engine::text {

namespace {

void append_u_escape(std::string& out, unsigned code) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", code & 0xFFFF);
  out += buf;
}

// Decodes one UTF-8 sequence at s[i] (advancing i); invalid bytes come back as themselves.
unsigned next_code_point(const std::string& s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i++]);
  if (c < 0x80) return c;
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  unsigned cp = c & (0x3F >> extra);
  while (extra-- > 0 && i < s.size()) cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  return cp;
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      default:
        break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20) {
      append_u_escape(out, u);
      ++i;
    } else if (!ensure_ascii || (u < 0x7f)) {
      out += c;
      ++i;
    } else {
      const unsigned cp = next_code_point(s, i);
      if (cp >= 0x10000) {
        const unsigned v = cp - 0x10000;
        append_u_escape(out, 0xD800 | (v >> 10));
        append_u_escape(out, 0xDC00 | (v & 0x3FF));
      } else {
        append_u_escape(out, cp);
      }
    }
  }
  out += '"';
}

struct Writer {
  const JsonDumpOptions& options;
  std::string item_separator;
  std::string key_separator;
  std::string out;

  void newline(int depth) {
    out += '\n';
    for (int i = 0; i < depth; ++i) out += *options.indent;
  }

  void write(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::none:
        out += "null";
        return;
      case Value::Kind::boolean:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::integer:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::floating: {
        const double d = v.as_double();
        if (std::isnan(d)) {
          out += "NaN";
        } else if (std::isinf(d)) {
          out += d > 0 ? "Infinity" : "-Infinity";
        } else {
          out += python_float_repr(d);
        }
        return;
      }
      case Value::Kind::string:
        append_json_string(out, v.as_string(), options.ensure_ascii);
        return;
      case Value::Kind::list: {
        const List& items = v.as_list();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_separator;
          if (options.indent) newline(depth + 1);
          write(items[i], depth + 1);
        }
        if (options.indent) newline(depth);
        out += ']';
        return;
      }
      case Value::Kind::dict: {
        if (v.is_namespace()) break;
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& item : v.as_dict().items) items.push_back(&item);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (options.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        }
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_separator;
          if (options.indent) newline(depth + 1);
          append_json_string(out, items[i]->first, options.ensure_ascii);
          out += key_separator;
          write(items[i]->second, depth + 1);
        }
        if (options.indent) newline(depth);
        out += '}';
        return;
      }
      default:
        break;
    }
    throw JinjaRuntimeError("tojson: Object of type " + v.type_name() + " is not JSON serializable");
  }
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Writer w{options, options.indent ? "," : ", ", ": ", {}};
  if (options.separators) {
    w.item_separator = options.separators->first;
    w.key_separator = options.separators->second;
  }
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace qtrain::engine::text
