// Added tokens (Note [Added tokens]): leftmost-longest matching, lstrip / rstrip / single_word,
// special:false tokens, normalized:true tokens, and decode's skip_special_tokens.
#include <gtest/gtest.h>

#include "tests/engine/text/tiny_tokenizer.h"

namespace qtrain::engine::text::test {
namespace {

using Strings = std::vector<std::string>;
using Ids = std::vector<int32_t>;

nlohmann::json letters() {
  return tiny_json({"a", "b", "x", "y", " ", "<", ">", "m"}, nlohmann::json::array());
}

TEST(AddedTokens, LeftmostLongestOnRawText) {
  auto j = letters();
  j["added_tokens"] = {added(8, "<m>"), added(9, "<m><m>"), added(10, "m>")};
  const auto t = make(j);
  EXPECT_EQ(tokens_of(t, "a<m><m><m>b"), (Strings{"a", "<m><m>", "<m>", "b"}));
  // "<m>" starts left of "m>", so it wins although both match.
  EXPECT_EQ(tokens_of(t, "<m>>"), (Strings{"<m>", ">"}));
}

TEST(AddedTokens, LstripAndRstripSwallowWhitespace) {
  auto j = letters();
  auto mask = added(8, "<m>");
  mask["lstrip"] = true;
  mask["rstrip"] = true;
  j["added_tokens"] = {mask};
  const auto t = make(j);
  const auto e = t.encode("a  <m>  b", false);
  EXPECT_EQ(e.ids, (Ids{0, 8, 1}));
  EXPECT_EQ(e.tokens, (Strings{"a", "  <m>  ", "b"}));  // HF's token string: the text covered
  EXPECT_EQ(e.offsets[1].begin, 1u);                    // the token's span holds the stripped spaces
  EXPECT_EQ(e.offsets[1].end, 8u);
  // Without the flags, the spaces stay text.
  j["added_tokens"] = {added(8, "<m>")};
  EXPECT_EQ(tokens_of(make(j), "a  <m>  b"), (Strings{"a", " ", " ", "<m>", " ", " ", "b"}));
}

TEST(AddedTokens, LstripStopsAtThePreviousToken) {
  auto j = letters();
  auto mask = added(8, "<m>");
  mask["lstrip"] = true;
  auto rs = added(2, "x");
  rs["rstrip"] = true;
  j["added_tokens"] = {mask, rs};
  EXPECT_EQ(tokens_of(make(j), "ax  <m>"), (Strings{"a", "x  ", "<m>"}));
}

TEST(AddedTokens, SingleWordNeedsNonWordNeighbours) {
  auto j = letters();
  auto ab = added(8, "ab");
  ab["single_word"] = true;
  j["added_tokens"] = {ab};
  const auto t = make(j);
  EXPECT_EQ(t.encode("x ab y", false).ids, (Ids{2, 4, 8, 4, 3}));
  EXPECT_EQ(t.encode("xaby", false).ids, (Ids{2, 0, 1, 3}));  // inside a word: plain text
  EXPECT_EQ(t.encode("ab", false).ids, (Ids{8}));
  EXPECT_EQ(t.encode("<ab>", false).ids, (Ids{5, 8, 6}));
}

TEST(AddedTokens, NonSpecialTokensAreSplitOutButNotSkipped) {
  auto j = letters();
  j["added_tokens"] = {added(8, "<m>", false), added(9, "<x>", true)};
  const auto t = make(j);
  EXPECT_EQ(t.encode("a<m>b<x>", false).ids, (Ids{0, 8, 1, 9}));
  EXPECT_EQ(t.decode({0, 8, 1, 9}, false), "a <m> b <x>");  // no decoder: tokens joined by spaces
  EXPECT_EQ(t.decode({0, 8, 1, 9}, true), "a <m> b");
  EXPECT_EQ(t.decode({0, 99}, false), "a");  // unknown ids are skipped, as HF does
  EXPECT_EQ(t.token_to_id("<m>"), 8);
  EXPECT_EQ(t.id_to_token(9), "<x>");
  EXPECT_EQ(t.vocab_size(), 10u);
}

TEST(AddedTokens, NormalizedTokensMatchTheNormalizedText) {
  auto j = letters();
  j["normalizer"] = {{"type", "Lowercase"}};
  auto ab = added(8, "AB", false);
  ab["normalized"] = true;
  j["added_tokens"] = {ab};
  const auto t = make(j);
  const auto e = t.encode("xAbyab", false);
  EXPECT_EQ(e.ids, (Ids{2, 8, 3, 8}));
  EXPECT_EQ(e.offsets[1].begin, 1u);
  EXPECT_EQ(e.offsets[1].end, 3u);
}

TEST(AddedTokens, IdsAreAssignedAsHfDoes) {
  // See Note [Added token ids]: the file's ids are not taken as given.
  auto j = letters();
  j["added_tokens"] = {added(50, "a"), added(77, "<q>"), added(3, "<r>"), added(77, "<q>")};
  const auto t = make(j);
  EXPECT_EQ(t.token_to_id("a"), 0);    // in the model's vocabulary: its id there
  EXPECT_EQ(t.token_to_id("<q>"), 8);  // the next id after the vocabulary
  EXPECT_EQ(t.token_to_id("<r>"), 9);
  EXPECT_EQ(t.vocab_size(), 10u);
  EXPECT_EQ(t.encode("<q><r>a", false).ids, (Ids{8, 9, 0}));
}

}  // namespace
}  // namespace qtrain::engine::text::test
