// Tests for engine/data/byte_tokenizer: ids are the bytes, specials sit above them, and any text
// (multibyte UTF-8 included) round-trips.
#include "engine/data/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/expect_error.h"

namespace qtrain::engine::data {
namespace {

TEST(ByteTokenizerTest, IdsAreBytesAndSpecialsFollow) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.encode("Ab\n"), (std::vector<int64_t>{65, 98, 10}));
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.bos(), 256);
  EXPECT_EQ(tok.eos(), 257);
  EXPECT_EQ(tok.pad(), 258);
  EXPECT_EQ(tok.vocab_size(), 259);
}

TEST(ByteTokenizerTest, MultibyteUtf8RoundTrips) {
  const ByteTokenizer tok;
  // 2-, 3- and 4-byte sequences: é, €, 😀.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC 5 \xF0\x9F\x98\x80";
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  // High bytes map to 128..255, never to negative ids through a signed char.
  EXPECT_EQ(ids[3], 0xC3);
  EXPECT_EQ(ids[4], 0xA9);
  EXPECT_EQ(ids.back(), 0x80);
  EXPECT_EQ(tok.decode(ids), text);

  // Every byte value, also invalid UTF-8 and NUL, comes back unchanged.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(tok.decode(tok.encode(all)), all);
}

TEST(ByteTokenizerTest, DecodeWritesSpecialsAndRejectsUnknownIds) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.decode({256, 104, 105, 257, 258}), "<s>hi</s><pad>");
  EXPECT_EQ(tok.decode({256, 104, 105, 257, 258}, /*skip_special_tokens=*/true), "hi");
  test::expect_error([&] { tok.decode({104, 259}); }, "id 259 at position 1 is outside the vocabulary [0, 259)");
  test::expect_error([&] { tok.decode({-1}); }, "id -1 at position 0");
}

}  // namespace
}  // namespace qtrain::engine::data
