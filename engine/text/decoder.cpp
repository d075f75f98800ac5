// See decoder.h. Each class follows the decoder of the same name in HF's
// tokenizers/src/decoders/.
#include "engine/text/decoder.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "engine/text/byte_level.h"
#include "engine/text/json_fields.h"
#include "engine/text/pattern.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {
namespace {

// All tokens' characters mapped back to bytes (a token with a character outside the map keeps
// its own bytes), then one lossy UTF-8 string.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mapped;
      bool ok = true;
      for (size_t k = 0; k < t.size() && ok;) {
        size_t n = 0;
        const auto b = byte_level_byte(utf8_decode(t, k, &n));
        if (b) mapped.push_back(static_cast<char>(*b));
        ok = b.has_value();
        k += n;
      }
      bytes += ok ? mapped : t;
    }
    tokens = {utf8_lossy(bytes)};
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : pattern_.find_all(t)) {
        out.append(t, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev);
      t = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Rust's u8::from_str_radix(s, 16) on two characters: an optional '+' then hex digits.
std::optional<unsigned char> hex_byte(std::string_view s) {
  if (s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  unsigned v = 0;
  for (const char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<unsigned>(d);
  }
  return static_cast<unsigned char>(v);
}

// Runs of <0xXX> tokens become their UTF-8 text, or one U+FFFD per byte when invalid.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      std::optional<unsigned char> b;
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') b = hex_byte(std::string_view(t).substr(3, 2));
      if (b) {
        pending.push_back(static_cast<char>(*b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens = {all};
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, size_t>> chars;  // (byte offset, length)
      std::vector<char32_t> cps;
      for (size_t k = 0; k < t.size();) {
        size_t n = 0;
        cps.push_back(utf8_decode(t, k, &n));
        chars.emplace_back(k, n);
        k += n;
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, cps.size()) && cps[i] == content_; ++i) start_cut = i + 1;
      size_t stop_cut = cps.size();
      for (size_t i = 0; i < stop_ && i < cps.size() && cps[cps.size() - 1 - i] == content_; ++i) {
        stop_cut = cps.size() - 1 - i;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

// The replacement character becomes a space; in the first token it is removed instead (all
// of them, as HF does) unless prepend_scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepend_)) out.push_back(' ');
          k += replacement_.size();
        } else {
          out.push_back(t[k++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepend_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t one_char(const std::string& s, const JsonSite& site) {
  size_t n = 0;
  if (s.empty() || (utf8_decode(s, 0, &n), n != s.size())) fail(site, "expected one character, got '" + s + "'");
  return utf8_decode(s, 0, &n);
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& j, const JsonSite& site) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, site);
  if (type == "ByteLevel") {
    check_keys(j, site, {"add_prefix_space", "trim_offsets", "use_regex"});
    return std::make_unique<ByteLevelDecoder>();
  }
  if (type == "Replace") {
    check_keys(j, site, {"pattern", "content"});
    if (!j.contains("pattern")) fail(site.key("pattern"), "missing");
    return std::make_unique<ReplaceDecoder>(Pattern::parse(j["pattern"], site.key("pattern")),
                                            required_field<std::string>(j, "content", site));
  }
  if (type == "ByteFallback") {
    check_keys(j, site, {});
    return std::make_unique<ByteFallbackDecoder>();
  }
  if (type == "Fuse") {
    check_keys(j, site, {});
    return std::make_unique<FuseDecoder>();
  }
  if (type == "Strip") {
    check_keys(j, site, {"content", "start", "stop"});
    return std::make_unique<StripDecoder>(
        one_char(required_field<std::string>(j, "content", site), site.key("content")),
        field<size_t>(j, "start", site, 0),
        field<size_t>(j, "stop", site, 0));
  }
  if (type == "Metaspace") {
    check_keys(j, site, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"});
    const std::string replacement = field<std::string>(j, "replacement", site, "\xE2\x96\x81");
    one_char(replacement, site.key("replacement"));
    bool prepend = field<bool>(j, "add_prefix_space", site, true);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const auto s = field<std::string>(j, "prepend_scheme", site, "always");
      if (s != "always" && s != "first" && s != "never") {
        fail(site.key("prepend_scheme"), "unknown prepend_scheme '" + s + "' (expected always, first or never)");
      }
      prepend = s != "never";
    }
    return std::make_unique<MetaspaceDecoder>(replacement, prepend);
  }
  if (type == "Sequence") {
    check_keys(j, site, {"decoders"});
    const auto& list = j.contains("decoders") ? j["decoders"] : nlohmann::json();
    if (!list.is_array()) fail(site.key("decoders"), "expected a list of decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = parse_decoder(list[i], site.key("decoders").index(i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  fail(site,
       "decoder type '" + type +
           "' is not supported by qtrain (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, "
           "Sequence)");
}

}  // namespace qtrain::engine::text
