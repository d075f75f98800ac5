// Normalizers, pre-tokenizers, post-processors and decoders on hand-made files, and the errors
// for what qtrain does not support.
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "engine/io/remove_tree.h"
#include "engine/text/regex.h"
#include "engine/text/text_error.h"
#include "engine/text/utf8.h"
#include "tests/engine/text/tiny_tokenizer.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::text::test {
namespace {

using Strings = std::vector<std::string>;
using Ids = std::vector<int32_t>;

const std::string kMeta = "\xE2\x96\x81";  // ▁

nlohmann::json sentencepiece_like() {
  return tiny_json({"<unk>", "<s>", kMeta, "h", "i", "t", kMeta + "h", kMeta + "hi", "hi"},
                   {kMeta + " h", kMeta + "h i", "h i"});
}

TEST(Metaspace, AlwaysPrependsToEverySegmentFirstOnlyAtTheStart) {
  auto j = sentencepiece_like();
  j["added_tokens"] = {added(1, "<s>")};
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "always"}, {"split", false}};
  EXPECT_EQ(tokens_of(make(j), "hi<s>hi"), (Strings{kMeta + "hi", "<s>", kMeta + "hi"}));
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  EXPECT_EQ(tokens_of(make(j), "hi<s>hi"), (Strings{kMeta + "hi", "<s>", "hi"}));
  // A segment that already starts with ▁ (a space) gets nothing more.
  EXPECT_EQ(tokens_of(make(j), " hi"), (Strings{kMeta + "hi"}));
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(tokens_of(make(j), "hi"), (Strings{"hi"}));
}

TEST(Metaspace, SplitKeepsTheMetaspaceWithTheNextWord) {
  auto j = sentencepiece_like();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(tokens_of(make(j), "hi hi"), (Strings{kMeta + "hi", kMeta + "hi"}));
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(make(j).decode({7, 7}, false), "hi hi");
}

TEST(Normalizer, PrependAndReplaceAsTheLegacyLlamaFile) {
  auto j = sentencepiece_like();
  j["added_tokens"] = {added(1, "<s>")};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", kMeta}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}};
  const auto t = make(j);
  // Prepend acts on every segment, also after a special token.
  EXPECT_EQ(tokens_of(t, "hi<s>hi"), (Strings{kMeta + "hi", "<s>", kMeta + "hi"}));
  const auto e = t.encode(" hi", false);
  EXPECT_EQ(e.tokens, (Strings{kMeta, kMeta + "hi"}));
  EXPECT_EQ(e.offsets[0].begin, 0u);  // the prepended ▁ belongs to the first character
  EXPECT_EQ(e.offsets[1].begin, 0u);  // ▁ from the space + "hi"
  EXPECT_EQ(e.offsets[1].end, 3u);
}

TEST(Normalizer, NfcComposesAndKeepsOffsets) {
  auto j = tiny_json({"e", "\xC3\xA9", "x"}, nlohmann::json::array());
  j["normalizer"] = {{"type", "NFC"}};
  const auto t = make(j);
  const auto e = t.encode("xe\xCC\x81x", false);  // e + U+0301
  EXPECT_EQ(e.tokens, (Strings{"x", "\xC3\xA9", "x"}));
  // As HF: the composed character stands for the "e" alone; the absorbed accent has no token.
  EXPECT_EQ(e.offsets[1].begin, 1u);
  EXPECT_EQ(e.offsets[1].end, 2u);
  EXPECT_EQ(e.offsets[2].begin, 4u);
}

TEST(PreTokenizer, SplitBehaviours) {
  auto j = tiny_json({"a", "b", "-", "a-", "-b", "--"}, {"a -", "- b", "- -"});
  auto split = [&](const std::string& behavior, bool invert) {
    j["pre_tokenizer"] = {
        {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
    return tokens_of(make(j), "a-b--a");
  };
  EXPECT_EQ(split("Isolated", false), (Strings{"a", "-", "b", "-", "-", "a"}));
  EXPECT_EQ(split("Removed", false), (Strings{"a", "b", "a"}));
  EXPECT_EQ(split("MergedWithPrevious", false), (Strings{"a-", "b", "-", "-", "a"}));
  EXPECT_EQ(split("MergedWithNext", false), (Strings{"a", "-b", "-", "-", "a"}));
  EXPECT_EQ(split("Contiguous", false), (Strings{"a", "-", "b", "--", "a"}));
  EXPECT_EQ(split("Removed", true), (Strings{"-", "-", "-"}));
}

TEST(PreTokenizer, DigitsIndividualOrRuns) {
  auto j = tiny_json({"1", "2", "12", "a"}, {"1 2"});
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(tokens_of(make(j), "a12"), (Strings{"a", "1", "2"}));
  j["pre_tokenizer"]["individual_digits"] = false;
  EXPECT_EQ(tokens_of(make(j), "a12"), (Strings{"a", "12"}));
}

TEST(PreTokenizer, ByteLevelMapsBytesAndDecodesBack) {
  auto j = tiny_json({"\xC4\xA0", "a", "\xC3\xA2", "\xC4\xA4", "\xC2\xAC"}, nlohmann::json::array());
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  const auto t = make(j);
  // " a" gets no second space; "a" gets one; € is E2 82 AC.
  EXPECT_EQ(t.encode("a", false).ids, (Ids{0, 1}));
  EXPECT_EQ(t.encode(" a", false).ids, (Ids{0, 1}));
  EXPECT_EQ(t.encode("\xE2\x82\xAC", false).ids, (Ids{0, 2, 3, 4}));
  EXPECT_EQ(t.decode({1, 2, 3, 4}, false), "a\xE2\x82\xAC");
  EXPECT_EQ(t.decode({1, 2, 3}, false), "a\xEF\xBF\xBD");  // cut mid-character: one U+FFFD
}

TEST(PostProcessor, TemplateAddsBosOnlyWithSpecialTokens) {
  auto j = sentencepiece_like();
  j["added_tokens"] = {added(1, "<s>")};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", nlohmann::json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  const auto t = make(j);
  EXPECT_EQ(t.encode("hi", true).ids, (Ids{1, 8}));
  EXPECT_EQ(t.encode("hi", false).ids, (Ids{8}));
  EXPECT_EQ(t.decode({1, 8}, true), "hi");
}

TEST(Decoder, ReplaceByteFallbackFuseStrip) {
  auto j = tiny_json({kMeta + "a", "<0xE2>", "<0x82>", "<0xAC>", "b"}, nlohmann::json::array());
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const auto t = make(j);
  EXPECT_EQ(t.decode({0, 1, 2, 3, 4, 0}, false),
            "a\xE2\x82\xAC"
            "b a");
}

TEST(Regex, LeftmostFirstWithUnicodeClassesAndLookahead) {
  const Regex r(R"((?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+)");
  const std::string text = "It's  1234 \xC5\xBF'\xC5\xBFt";  // ſ'ſt: (?i:'s) matches 'ſ
  Strings pieces;
  for (const auto& [b, e] : r.find_all(text)) pieces.push_back(text.substr(b, e - b));
  EXPECT_EQ(pieces, (Strings{"It", "'s", " ", " ", "123", "4", " \xC5\xBF", "'\xC5\xBF", "t"}));
}

TEST(Utf8, LossyDecodingAsRust) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");  // a cut 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
}

void expect_message(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const TokenizerError& e) {
    for (const auto& frag : fragments) {
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what() << "\nmissing: " << frag;
    }
  }
}

TEST(Errors, UnsupportedComponentsNameTheFileAndPath) {
  const auto dir = qtrain::test::fresh_test_dir(true);
  auto write = [&](const nlohmann::json& j) { std::ofstream(dir / "tokenizer.json") << j.dump(); };
  auto j = tiny_json({"a"}, nlohmann::json::array());
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
  write(j);
  expect_message([&] { Tokenizer::load(dir); },
                 {(dir / "tokenizer.json").string() + ": normalizer.normalizers[1]", "'Precompiled' is not supported"});
  j = tiny_json({"a"}, nlohmann::json::array());
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  write(j);
  expect_message([&] { Tokenizer::load(dir); }, {"tokenizer.json: pre_tokenizer", "'Whitespace'"});
  j = tiny_json({"a"}, nlohmann::json::array());
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}, {"invert", false}};
  write(j);
  expect_message([&] { Tokenizer::load(dir); }, {"tokenizer.json: pre_tokenizer.pattern", "Oniguruma cannot compile"});
  j = tiny_json({"a"}, nlohmann::json::array());
  j["model"]["type"] = "Unigram";
  write(j);
  expect_message([&] { Tokenizer::load(dir); }, {"tokenizer.json: model.type", "Unigram"});
  j = tiny_json({"a"}, nlohmann::json::array());
  j["decoder"] = {{"type", "WordPiece"}};
  write(j);
  expect_message([&] { Tokenizer::load(dir); }, {"tokenizer.json: decoder", "'WordPiece'"});
  j = tiny_json({"a"}, nlohmann::json::array());
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}, {"frobnicate", true}};
  write(j);
  expect_message([&] { Tokenizer::load(dir); }, {"tokenizer.json: post_processor.frobnicate", "not supported"});
  expect_message([&] { Tokenizer::load(dir / "nowhere"); }, {"tokenizer.json: not found"});
  qtrain::engine::io::remove_tree(dir);
}

TEST(Errors, InvalidUtf8InputSaysWhere) {
  const auto t = make(tiny_json({"a"}, nlohmann::json::array()));
  expect_message([&] { t.encode("aa\xFF", false); }, {"not valid UTF-8 (at byte 2)"});
}

TEST(Config, ReadsSpecialTokenNamesAndTheChatTemplate) {
  const auto dir = qtrain::test::fresh_test_dir(true);
  std::ofstream(dir / "tokenizer.json") << tiny_json({"a"}, nlohmann::json::array()).dump();
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": null, "eos_token": "<|im_end|>", "pad_token": {"content": "<pad>"}, "chat_template": "{{ x }}"})";
  const auto t = Tokenizer::load(dir);
  EXPECT_FALSE(t.config().bos_token.has_value());
  EXPECT_EQ(t.config().eos_token, "<|im_end|>");
  EXPECT_EQ(t.config().pad_token, "<pad>");
  EXPECT_EQ(t.config().chat_template, "{{ x }}");
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::text::test
