// Sizes and bandwidths as written in configs and on the command line: units, bare numbers,
// spacing and case, the text that reads back exactly, and what is refused.
#include "engine/config/byte_size.h"

#include <gtest/gtest.h>

namespace qtrain::engine::config {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(ByteSize, ParsesUnitsBareNumbersSpacingAndCase) {
  EXPECT_EQ(parse_byte_size("24GiB"), 24 * kGiB);
  EXPECT_EQ(parse_byte_size("24 GiB"), 24 * kGiB);
  EXPECT_EQ(parse_byte_size("24gib"), 24 * kGiB);
  EXPECT_EQ(parse_byte_size("24"), 24 * kGiB);  // axolotl: a bare number is GiB
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3 * kGiB / 2);
  EXPECT_EQ(parse_byte_size("24GB"), int64_t{24'000'000'000});
  EXPECT_EQ(parse_byte_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("512MB"), int64_t{512'000'000});
  EXPECT_EQ(parse_byte_size("3KiB"), 3072);
  EXPECT_EQ(parse_byte_size("2TB"), int64_t{2'000'000'000'000});
  EXPECT_EQ(parse_byte_size("1TiB"), int64_t{1} << 40);
  EXPECT_EQ(parse_byte_size("100B"), 100);
  EXPECT_EQ(parse_byte_size(" 0 "), 0);
}

TEST(ByteSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "GiB", "-1GiB", "24 GiBs", "24Gb/s", "1e3GB", "24 G", "x24", "1..5GiB", "nan"}) {
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << bad;
  }
}

TEST(ByteSize, FormatsTheShortestExactText) {
  EXPECT_EQ(format_byte_size(0), "0");
  EXPECT_EQ(format_byte_size(24 * kGiB), "24GiB");
  EXPECT_EQ(format_byte_size(int64_t{24'000'000'000}), "24GB");
  EXPECT_EQ(format_byte_size(3 * kGiB / 2), "1536MiB");
  EXPECT_EQ(format_byte_size(int64_t{1} << 40), "1TiB");
  EXPECT_EQ(format_byte_size(1000001), "1000001B");
  for (const int64_t bytes :
       {int64_t{0}, int64_t{1}, int64_t{1023}, 24 * kGiB, int64_t{24'000'000'000}, int64_t{123456789}}) {
    EXPECT_EQ(parse_byte_size(format_byte_size(bytes)), bytes) << bytes;
  }
}

TEST(ByteSize, Bandwidths) {
  EXPECT_EQ(parse_bandwidth("25GB/s"), 25e9);
  EXPECT_EQ(parse_bandwidth("25 GB/s"), 25e9);
  EXPECT_EQ(parse_bandwidth("25"), 25e9);  // a bare number is GB/s
  EXPECT_EQ(parse_bandwidth("12.5GiB/s"), 12.5 * 1073741824.0);
  EXPECT_EQ(parse_bandwidth("800MB"), 8e8);
  for (const char* bad : {"", "0", "0GB/s", "fast", "-1GB/s", "25GB/h"}) {
    EXPECT_FALSE(parse_bandwidth(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace qtrain::engine::config
