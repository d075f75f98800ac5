// Tests for engine/io/crc32c against the CRC-32C examples of RFC 3720 (iSCSI), appendix B.4, and
// the catalogue's check value of "123456789": whole, split at every point (the continuation
// argument), and over a file larger than the reader's block.
#include "engine/io/crc32c.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::io {
namespace {

std::string bytes_of(int first, int step) {
  std::string s;
  for (int i = 0; i < 32; ++i) s.push_back(static_cast<char>(first + step * i));
  return s;
}

TEST(Crc32cTest, MatchesThePublishedExamples) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(crc32c(bytes_of(0, 1)), 0x46DD794Eu);
  EXPECT_EQ(crc32c(bytes_of(31, -1)), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c_text(0x0000abcd), "crc32c:0000abcd");
}

TEST(Crc32cTest, ContinuesAcrossAnySplit) {
  std::string s;
  for (int i = 0; i < 100; ++i) s.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = crc32c(s);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(crc32c(std::string_view(s).substr(cut), crc32c(std::string_view(s).substr(0, cut))), whole) << cut;
  }
}

TEST(Crc32cTest, AFileLargerThanOneBlockGivesTheChecksumOfItsBytes) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  std::string s(3 * (1 << 20) + 5, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(dir / "f", std::ios::binary) << s;
  EXPECT_EQ(crc32c_of_file(dir / "f"), crc32c(s));
  test::expect_error([&] { crc32c_of_file(dir / "missing"); }, (dir / "missing").string() + " (");
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::io
