// See normalizer.h.
#include "engine/text/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "engine/text/json_fields.h"
#include "engine/text/pattern.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {
namespace {

std::string utf8proc_apply(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()),
                              &out,
                              static_cast<utf8proc_option_t>(options));
  if (n < 0) throw TokenizerError(std::string("utf8proc: ") + utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

// Note [Unicode normalization offsets]
// utf8proc normalizes a string but does not say which output character came from which input
// character, and token offsets need that. Normalization only acts inside runs that start at a
// starter (canonical combining class 0) and go on with non-starters (and, for Hangul, the
// conjoining vowel and trailing jamo that compose with the syllable before them), so the text
// is cut before every other starter and each run is normalized alone. Within a run, output
// characters take the original characters in order, as HF's alignment (the
// unicode-normalization-alignments crate fed to NormalizedString::transform) does: when the
// run shrinks by n characters (a composition), the first output character stands for the first
// original one and the n after it are dropped (so NFC "e + U+0301" has the offsets of the "e"
// alone); when it grows, the extra characters share the last original character's offsets. A
// few other starters do combine with the one before them (e.g. U+0B47 U+0B3E); when the
// runs' concatenation differs from normalizing the whole text, the text is normalized as one run
// instead: the text is then still exactly utf8proc's result, only the offsets get coarse (every
// token of that segment covers the segment).
class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options | UTF8PROC_STABLE) {}

  void normalize(AlignedText& t) const override {
    if (t.empty()) return;
    const std::string whole = utf8proc_apply(t.text, options_);
    if (whole == t.text) return;
    std::vector<size_t> cuts{0};
    for (size_t i = 0; i < t.text.size();) {
      size_t n = 0;
      const char32_t c = utf8_decode(t.text, i, &n);
      const bool jamo_vt = (c >= 0x1161 && c <= 0x1175) || (c >= 0x11A8 && c <= 0x11C2);
      if (i > 0 && !jamo_vt && utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class == 0) {
        cuts.push_back(i);
      }
      i += n;
    }
    cuts.push_back(t.text.size());
    AlignedText out;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const auto original = std::string_view(t.text).substr(cuts[k], cuts[k + 1] - cuts[k]);
      const std::string run = utf8proc_apply(original, options_);
      if (run == original) {
        out.append(t, cuts[k], cuts[k + 1]);
        continue;
      }
      std::vector<Span> spans;  // per original character
      for (size_t i = 0; i < original.size();) {
        size_t n = 0;
        utf8_decode(original, i, &n);
        spans.push_back(t.span(cuts[k] + i, cuts[k] + i + n));
        i += n;
      }
      std::vector<size_t> starts;  // output characters
      for (size_t i = 0; i < run.size();) {
        starts.push_back(i);
        size_t n = 0;
        utf8_decode(run, i, &n);
        i += n;
      }
      const size_t shrink = spans.size() > starts.size() ? spans.size() - starts.size() : 0;
      for (size_t i = 0; i < starts.size(); ++i) {
        const size_t from = i == 0 ? 0 : std::min(i + shrink, spans.size() - 1);
        const size_t end = i + 1 < starts.size() ? starts[i + 1] : run.size();
        out.append(std::string_view(run).substr(starts[i], end - starts[i]), spans[from]);
      }
    }
    if (out.text != whole) {
      out = AlignedText{};
      out.append(whole, t.span(0, t.text.size()));
    }
    t = std::move(out);
  }

 private:
  int options_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(AlignedText& t) const override {
    AlignedText out;
    for (size_t i = 0; i < t.text.size();) {
      size_t n = 0;
      const char32_t c = utf8_decode(t.text, i, &n);
      std::string lower;
      if (c == 0x130) {  // Rust's to_lowercase: İ -> i + U+0307 (the one multi-character lowercase)
        lower = "i\xCC\x87";
      } else {
        utf8_append(lower, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
      }
      out.append(lower, t.span(i, i + n));
      i += n;
    }
    t = std::move(out);
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(AlignedText& t) const override {
    size_t begin = 0, end = t.text.size();
    while (left_ && begin < end) {
      size_t n = 0;
      if (!is_white_space(utf8_decode(t.text, begin, &n))) break;
      begin += n;
    }
    while (right_ && end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(t.text[start]) & 0xC0) == 0x80) --start;
      size_t n = 0;
      if (!is_white_space(utf8_decode(t.text, start, &n))) break;
      end = start;
    }
    t = t.slice(begin, end);
  }

 private:
  bool left_, right_;
};

// HF's Prepend: a non-empty text gets `prepend` in front, aligned to its first character.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(AlignedText& t) const override {
    if (t.empty()) return;
    AlignedText out;
    out.append(prepend_, t.align[0]);
    out.append(t, 0, t.text.size());
    t = std::move(out);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(AlignedText& t) const override {
    const auto matches = pattern_.find_all(t.text);
    if (matches.empty()) return;
    AlignedText out;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.append(t, prev, b);
      if (b < e) out.append(content_, t.span(b, e));
      prev = e;
    }
    out.append(t, prev, t.text.size());
    t = std::move(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(AlignedText& t) const override {
    for (const auto& p : parts_) p->normalize(t);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const JsonSite& site) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, site);
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    check_keys(j, site, {});
    int options = type[type.size() - 1] == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (type.size() == 4) options |= UTF8PROC_COMPAT;
    return std::make_unique<UnicodeNormalizer>(options);
  }
  if (type == "Lowercase") {
    check_keys(j, site, {});
    return std::make_unique<LowercaseNormalizer>();
  }
  if (type == "Strip") {
    check_keys(j, site, {"strip_left", "strip_right"});
    return std::make_unique<StripNormalizer>(field<bool>(j, "strip_left", site, true),
                                             field<bool>(j, "strip_right", site, true));
  }
  if (type == "Prepend") {
    check_keys(j, site, {"prepend"});
    return std::make_unique<PrependNormalizer>(required_field<std::string>(j, "prepend", site));
  }
  if (type == "Replace") {
    check_keys(j, site, {"pattern", "content"});
    if (!j.contains("pattern")) fail(site.key("pattern"), "missing");
    return std::make_unique<ReplaceNormalizer>(Pattern::parse(j["pattern"], site.key("pattern")),
                                               required_field<std::string>(j, "content", site));
  }
  if (type == "Sequence") {
    check_keys(j, site, {"normalizers"});
    const auto& list = j.contains("normalizers") ? j["normalizers"] : nlohmann::json();
    if (!list.is_array()) fail(site.key("normalizers"), "expected a list of normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = parse_normalizer(list[i], site.key("normalizers").index(i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  fail(site,
       "normalizer type '" + type +
           "' is not supported by qtrain (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, "
           "Sequence)");
}

}  // namespace qtrain::engine::text
