// The BPE rules of Note [BPE merge order], on hand-made vocabularies.
#include <gtest/gtest.h>

#include "engine/text/text_error.h"
#include "tests/engine/text/tiny_tokenizer.h"

namespace qtrain::engine::text::test {
namespace {

using Strings = std::vector<std::string>;

TEST(Bpe, LowestRankFirstThenLeftmost) {
  const auto t = make(tiny_json({"a", "b", "c", "ab", "bc", "aa"}, {"b c", "a b", "a a"}));
  EXPECT_EQ(tokens_of(t, "abc"), (Strings{"a", "bc"}));  // "b c" has the lower rank
  EXPECT_EQ(tokens_of(t, "aaa"), (Strings{"aa", "a"}));  // equal ranks: leftmost first
  EXPECT_EQ(tokens_of(t, "aaaa"), (Strings{"aa", "aa"}));
}

TEST(Bpe, StaleHeapEntriesAreSkipped) {
  // "b c" merges first; the queued (a, b) entry is then stale: the pair at its position is now
  // (a, bc), which merges into "abc", not "ab".
  const auto t = make(tiny_json({"a", "b", "c", "ab", "bc", "abc"}, {"b c", "a b", "a bc"}));
  EXPECT_EQ(tokens_of(t, "abc"), (Strings{"abc"}));
  // A right symbol that was merged away leaves its queued entry dead.
  const auto u = make(tiny_json({"a", "b", "c", "ab", "bc"}, {"a b", "b c"}));
  EXPECT_EQ(tokens_of(u, "abc"), (Strings{"ab", "c"}));
}

TEST(Bpe, PairAndStringMergesAreTheSame) {
  const Strings vocab{"a", "b", "c", "ab", "abc"};
  const auto strings = make(tiny_json(vocab, {"a b", "ab c"}));
  const auto pairs = make(
      tiny_json(vocab, nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})})));
  EXPECT_EQ(tokens_of(strings, "abcab"), (Strings{"abc", "ab"}));
  EXPECT_EQ(tokens_of(pairs, "abcab"), tokens_of(strings, "abcab"));
}

TEST(Bpe, DuplicateMergeKeepsTheLastRank) {
  // "a b" is listed first and last: its rank is the last one, after "b c".
  const auto t = make(tiny_json({"a", "b", "c", "ab", "bc"}, {"a b", "b c", "a b"}));
  EXPECT_EQ(tokens_of(t, "abc"), (Strings{"a", "bc"}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyPieces) {
  auto j = tiny_json({"a", "b", "c", "abc"}, nlohmann::json::array());
  EXPECT_EQ(tokens_of(make(j), "abc"), (Strings{"a", "b", "c"}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(tokens_of(make(j), "abc"), (Strings{"abc"}));
  EXPECT_EQ(tokens_of(make(j), "abca"), (Strings{"a", "b", "c", "a"}));
}

TEST(Bpe, ByteFallbackIsAllOrNothingPerCharacter) {
  // é is C3 A9; ü is C3 BC and <0xBC> is missing, so ü becomes unk, not half bytes.
  auto j = tiny_json({"<unk>", "a", "<0xC3>", "<0xA9>"}, nlohmann::json::array());
  j["model"]["unk_token"] = "<unk>";
  j["model"]["byte_fallback"] = true;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  const auto t = make(j);
  EXPECT_EQ(tokens_of(t, "aéü"), (Strings{"a", "<0xC3>", "<0xA9>", "<unk>"}));
  const auto e = t.encode("aé", false);
  EXPECT_EQ(e.offsets.size(), 3u);
  EXPECT_EQ(e.offsets[1].begin, 1u);  // both byte tokens lie inside é's bytes
  EXPECT_EQ(e.offsets[2].end, 3u);
  EXPECT_EQ(t.decode({1, 2, 3}, false), "aé");
  EXPECT_EQ(t.decode({1, 2}, false), "a\xEF\xBF\xBD");  // a lone lead byte: one U+FFFD per byte
}

TEST(Bpe, FuseUnkJoinsConsecutiveUnknowns) {
  auto j = tiny_json({"<unk>", "a"}, nlohmann::json::array());
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(tokens_of(make(j), "xyaz"), (Strings{"<unk>", "<unk>", "a", "<unk>"}));
  j["model"]["fuse_unk"] = true;
  const auto t = make(j);
  EXPECT_EQ(tokens_of(t, "xyaz"), (Strings{"<unk>", "a", "<unk>"}));
  EXPECT_EQ(t.encode("xyaz", false).offsets[0].end, 2u);
  // Without unk_token, unknown characters are dropped (as HF does).
  EXPECT_EQ(tokens_of(make(tiny_json({"a"}, nlohmann::json::array())), "xay"), (Strings{"a"}));
}

TEST(Bpe, ContinuingSubwordPrefixAndEndOfWordSuffix) {
  // "abc" starts as a, ##b, ##c</w>; merging (a, ##b) gives "ab": the right part's prefix is
  // dropped, as HF does.
  auto j = tiny_json({"a", "##b", "##c</w>", "ab"}, {"a ##b"});
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(tokens_of(make(j), "abc"), (Strings{"ab", "##c</w>"}));
}

TEST(Bpe, DropoutIsRejected) {
  auto j = tiny_json({"a"}, nlohmann::json::array());
  j["model"]["dropout"] = 0.1;
  try {
    make(j);
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny/tokenizer.json: model.dropout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"dropout\": null"), std::string::npos) << e.what();
  }
}

TEST(Bpe, MergeOutsideTheVocabularyIsAnError) {
  try {
    make(tiny_json({"a", "b"}, {"a b"}));
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("model.merges[0]: the merged token 'ab' is not in model.vocab"),
              std::string::npos)
        << e.what();
  }
}

// Found by fuzz/tokenizer_fuzz: an id of 2^31 - 1 sized the id table to 16 GB before any error.
TEST(Bpe, AnIdBeyondAnyVocabularyIsAnErrorNotAHugeTable) {
  auto j = tiny_json({"a", "b"}, nlohmann::json::array());
  j["model"]["vocab"]["b"] = 2147483647;
  try {
    make(j);
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny/tokenizer.json: model.vocab.b"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("id 2147483647 is above 4194303"), std::string::npos) << e.what();
  }
  j["model"]["vocab"]["b"] = kMaxTokenId;  // the limit itself is accepted
  EXPECT_NO_THROW(make(j));
}

}  // namespace
}  // namespace qtrain::engine::text::test
