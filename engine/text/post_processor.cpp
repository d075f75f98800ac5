// See post_processor.h.
#include "engine/text/post_processor.h"

#include <nlohmann/json.hpp>

#include "engine/text/json_fields.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {
namespace {

// The single-sequence template: a list of items, each the sequence ($A) or a special token's ids.
class TemplateProcessor : public PostProcessor {
 public:
  struct Item {
    bool sequence = false;
    std::vector<int32_t> ids;
    std::vector<std::string> tokens;
  };
  explicit TemplateProcessor(std::vector<Item> single) : single_(std::move(single)) {}

  void process(Encoding& e, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    Encoding out;
    for (const auto& item : single_) {
      if (item.sequence) {
        out.ids.insert(out.ids.end(), e.ids.begin(), e.ids.end());
        out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
        out.offsets.insert(out.offsets.end(), e.offsets.begin(), e.offsets.end());
        out.special_tokens_mask.insert(
            out.special_tokens_mask.end(), e.special_tokens_mask.begin(), e.special_tokens_mask.end());
      } else {
        out.ids.insert(out.ids.end(), item.ids.begin(), item.ids.end());
        out.tokens.insert(out.tokens.end(), item.tokens.begin(), item.tokens.end());
        out.offsets.insert(out.offsets.end(), item.ids.size(), Span{});
        out.special_tokens_mask.insert(out.special_tokens_mask.end(), item.ids.size(), 1);
      }
    }
    e = std::move(out);
  }

 private:
  std::vector<Item> single_;
};

// HF's ByteLevel post-processor (processors/byte_level.rs process_offsets): with trim_offsets,
// token offsets lose the token's leading and trailing spaces ('Ġ' or whitespace characters),
// except the one space a first token got from add_prefix_space. It never changes ids.
class ByteLevelProcessor : public PostProcessor {
 public:
  ByteLevelProcessor(bool trim_offsets, bool add_prefix_space)
      : trim_offsets_(trim_offsets), add_prefix_space_(add_prefix_space) {}
  void process(Encoding& e, bool) const override {
    if (!trim_offsets_) return;
    for (size_t i = 0; i < e.ids.size(); ++i) {
      std::vector<bool> space;
      const std::string& t = e.tokens[i];
      for (size_t k = 0; k < t.size();) {
        size_t n = 0;
        const char32_t c = utf8_decode(t, k, &n);
        space.push_back(c == 0x120 || is_white_space(c));
        k += n;
      }
      size_t leading = 0, trailing = 0;
      while (leading < space.size() && space[leading]) ++leading;
      while (trailing < space.size() && space[space.size() - 1 - trailing]) ++trailing;
      Span& s = e.offsets[i];
      if (leading > 0) {
        if ((i == 0 || s.begin == 0) && add_prefix_space_ && leading == 1) leading = 0;
        s.begin = std::min<uint32_t>(s.begin + static_cast<uint32_t>(leading), s.end);
      }
      if (trailing > 0 && s.end >= trailing)
        s.end = std::max<uint32_t>(s.end - static_cast<uint32_t>(trailing), s.begin);
    }
  }

 private:
  bool trim_offsets_;
  bool add_prefix_space_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(Encoding& e, bool add_special_tokens) const override {
    for (const auto& p : parts_) p->process(e, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> parse_template(const nlohmann::json& j, const JsonSite& site) {
  check_keys(j, site, {"single", "pair", "special_tokens"});
  const auto ssite = site.key("single");
  if (!j.contains("single") || !j["single"].is_array()) fail(ssite, "expected a list of template items");
  const auto& specials = j.contains("special_tokens") ? j["special_tokens"] : nlohmann::json::object();
  std::vector<TemplateProcessor::Item> items;
  for (size_t i = 0; i < j["single"].size(); ++i) {
    const auto& e = j["single"][i];
    const auto isite = ssite.index(i);
    TemplateProcessor::Item item;
    if (e.contains("Sequence")) {
      const auto id = e["Sequence"].value("id", std::string());
      if (id != "A") fail(isite, "a single-sequence template can only hold sequence A, got " + e.dump());
      item.sequence = true;
    } else if (e.contains("SpecialToken")) {
      const auto name = e["SpecialToken"].value("id", std::string());
      if (!specials.contains(name)) fail(isite, "special token '" + name + "' is not in special_tokens");
      const auto& spec = specials[name];
      const auto sp = site.key("special_tokens").key(name);
      item.ids = required_field<std::vector<int32_t>>(spec, "ids", sp);
      item.tokens = required_field<std::vector<std::string>>(spec, "tokens", sp);
      if (item.ids.size() != item.tokens.size()) fail(sp, "ids and tokens differ in length");
    } else {
      fail(isite, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + e.dump());
    }
    items.push_back(std::move(item));
  }
  return std::make_unique<TemplateProcessor>(std::move(items));
}

}  // namespace

std::unique_ptr<PostProcessor> parse_post_processor(const nlohmann::json& j, const JsonSite& site) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, site);
  if (type == "TemplateProcessing") return parse_template(j, site);
  if (type == "ByteLevel") {
    check_keys(j, site, {"add_prefix_space", "trim_offsets", "use_regex"});
    return std::make_unique<ByteLevelProcessor>(field<bool>(j, "trim_offsets", site, true),
                                                field<bool>(j, "add_prefix_space", site, true));
  }
  if (type == "Sequence") {
    check_keys(j, site, {"processors"});
    const auto& list = j.contains("processors") ? j["processors"] : nlohmann::json();
    if (!list.is_array()) fail(site.key("processors"), "expected a list of post-processors");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = parse_post_processor(list[i], site.key("processors").index(i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  fail(site,
       "post-processor type '" + type +
           "' is not supported by qtrain (supported: TemplateProcessing, ByteLevel, Sequence)");
}

}  // namespace qtrain::engine::text
