// See pre_tokenizer.h. The split behaviours follow `NormalizedString::split` in HF's
// tokenizers/src/tokenizer/normalizer.rs.
#include "engine/text/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "engine/text/byte_level.h"
#include "engine/text/json_fields.h"
#include "engine/text/pattern.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Cut {
  size_t begin, end;
  bool is_match;
};

// Matches -> the whole text as alternating (range, is_match) cuts, as HF's Pattern::find_matches.
std::vector<Cut> cuts_from_matches(const std::vector<Match>& matches, size_t size) {
  std::vector<Cut> cuts;
  if (size == 0) return {{0, 0, false}};
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) cuts.push_back({prev, b, false});
    cuts.push_back({b, e, true});
    prev = e;
  }
  if (prev != size) cuts.push_back({prev, size, false});
  return cuts;
}

// Appends to `out` the pieces of `t` cut at `cuts` with `behavior` (HF: NormalizedString::split).
void split_piece(const AlignedText& t, std::vector<Cut> cuts, Behavior behavior, std::vector<AlignedText>& out) {
  std::vector<Cut> kept;  // is_match here means "remove"
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto c : cuts) kept.push_back({c.begin, c.end, false});
      break;
    case Behavior::kRemoved:
      kept = cuts;
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (auto c : cuts) {
        if (c.is_match && !previous_match && !kept.empty()) {
          kept.back().end = c.end;
        } else {
          kept.push_back({c.begin, c.end, false});
        }
        previous_match = c.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (auto c : cuts) {
        if (c.is_match == previous_match && !kept.empty()) {
          kept.back().end = c.end;
        } else {
          kept.push_back({c.begin, c.end, false});
        }
        previous_match = c.is_match;
      }
      break;
    }
  }
  for (const auto& k : kept) {
    if (!k.is_match && k.end > k.begin) out.push_back(t.slice(k.begin, k.end));
  }
}

// One cut per character for which `pred` holds (HF's Pattern for Fn(char) -> bool).
std::vector<Cut> cuts_by_char(const std::string& s, const std::function<bool(char32_t)>& pred) {
  std::vector<Match> matches;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const char32_t c = utf8_decode(s, i, &n);
    if (pred(c)) matches.emplace_back(i, i + n);
    i += n;
  }
  return cuts_from_matches(matches, s.size());
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<AlignedText>& pieces) const override {
    std::vector<AlignedText> out;
    for (const auto& p : pieces) {
      auto cuts = cuts_from_matches(pattern_.find_all(p.text), p.text.size());
      if (invert_) {
        for (auto& c : cuts) c.is_match = !c.is_match;
      }
      split_piece(p, std::move(cuts), behavior_, out);
    }
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<AlignedText>& pieces) const override {
    std::vector<AlignedText> split;
    for (auto& p : pieces) {
      if (add_prefix_space_ && p.text[0] != ' ') {
        AlignedText q;
        q.append(" ", p.align[0]);
        q.append(p, 0, p.text.size());
        p = std::move(q);
      }
      if (regex_) {
        split_piece(p, cuts_from_matches(regex_->find_all(p.text), p.text.size()), Behavior::kIsolated, split);
      } else {
        split.push_back(std::move(p));
      }
    }
    const auto& chars = byte_level_chars();
    for (auto& p : split) {
      AlignedText mapped;
      for (size_t i = 0; i < p.text.size(); ++i)
        mapped.append(chars[static_cast<unsigned char>(p.text[i])], p.align[i]);
      p = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<AlignedText>& pieces) const override {
    std::vector<AlignedText> out;
    for (const auto& p : pieces) {
      AlignedText r;
      for (size_t i = 0; i < p.text.size(); ++i) {
        if (p.text[i] == ' ') {
          r.append(replacement_, p.align[i]);
        } else {
          r.append(p, i, i + 1);
        }
      }
      const bool starts = r.text.starts_with(replacement_);
      // "first": only the segment that starts the input (HF: offsets_original().0 == 0).
      if (!starts &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.align[0].begin == 0))) {
        AlignedText q;
        q.append(replacement_, r.align[0]);
        q.append(r, 0, r.text.size());
        r = std::move(q);
      }
      if (split_) {
        std::vector<Match> matches;
        for (size_t i = r.text.find(replacement_); i != std::string::npos;
             i = r.text.find(replacement_, i + replacement_.size())) {
          matches.emplace_back(i, i + replacement_.size());
        }
        split_piece(r, cuts_from_matches(matches, r.text.size()), Behavior::kMergedWithNext, out);
      } else {
        out.push_back(std::move(r));
      }
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<AlignedText>& pieces) const override {
    std::vector<AlignedText> out;
    for (const auto& p : pieces) {
      split_piece(p, cuts_by_char(p.text, is_numeric), individual_ ? Behavior::kIsolated : Behavior::kContiguous, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<AlignedText>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Behavior parse_behavior(const nlohmann::json& j, const JsonSite& site) {
  const std::string b = required_field<std::string>(j, "behavior", site);
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  fail(site.key("behavior"),
       "unknown split behavior '" + b +
           "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

PrependScheme parse_prepend_scheme(const nlohmann::json& j, const JsonSite& site) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = required_field<std::string>(j, "prepend_scheme", site);
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    fail(site.key("prepend_scheme"), "unknown prepend_scheme '" + s + "' (expected always, first or never)");
  }
  // Files written before prepend_scheme existed carry add_prefix_space instead.
  return field<bool>(j, "add_prefix_space", site, true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j, const JsonSite& site) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, site);
  if (type == "Split") {
    check_keys(j, site, {"pattern", "behavior", "invert"});
    if (!j.contains("pattern")) fail(site.key("pattern"), "missing");
    return std::make_unique<SplitPreTokenizer>(Pattern::parse(j["pattern"], site.key("pattern")),
                                               parse_behavior(j, site),
                                               field<bool>(j, "invert", site, false));
  }
  if (type == "ByteLevel") {
    // trim_offsets only matters to the ByteLevel post-processor.
    check_keys(j, site, {"add_prefix_space", "trim_offsets", "use_regex"});
    try {
      return std::make_unique<ByteLevelPreTokenizer>(field<bool>(j, "add_prefix_space", site, true),
                                                     field<bool>(j, "use_regex", site, true));
    } catch (const TokenizerError& e) {
      fail(site, e.what());
    }
  }
  if (type == "Metaspace") {
    check_keys(j, site, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"});
    const std::string replacement = field<std::string>(j, "replacement", site, "\xE2\x96\x81");
    size_t n = 0;
    if (replacement.empty() || (utf8_decode(replacement, 0, &n), n != replacement.size())) {
      fail(site.key("replacement"), "expected one character, got '" + replacement + "'");
    }
    return std::make_unique<MetaspacePreTokenizer>(
        replacement, parse_prepend_scheme(j, site), field<bool>(j, "split", site, true));
  }
  if (type == "Digits") {
    check_keys(j, site, {"individual_digits"});
    return std::make_unique<DigitsPreTokenizer>(field<bool>(j, "individual_digits", site, false));
  }
  if (type == "Sequence") {
    check_keys(j, site, {"pretokenizers"});
    const auto& list = j.contains("pretokenizers") ? j["pretokenizers"] : nlohmann::json();
    if (!list.is_array()) fail(site.key("pretokenizers"), "expected a list of pre-tokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = parse_pre_tokenizer(list[i], site.key("pretokenizers").index(i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  fail(site,
       "pre-tokenizer type '" + type +
           "' is not supported by qtrain (supported: ByteLevel, Split, Metaspace, Digits, Sequence)");
}

}  // namespace qtrain::engine::text
