// Tests for engine/config/dataset_split: a split reads as the datasets library reads it for a
// local file (ReadInstruction: percent bounds round to the closest row, halves to even, negative
// bounds count from the end, everything clamped to the rows), and what it does not read is
// refused with the reason.
#include "engine/config/dataset_split.h"

#include <gtest/gtest.h>

namespace qtrain::engine::config {
namespace {

std::pair<int64_t, int64_t> rows_of(const std::string& split, int64_t rows) {
  const auto parsed = parse_split(split);
  EXPECT_EQ(parsed.problem, "") << split;
  return split_rows(parsed.slice, rows);
}

TEST(DatasetSplit, SelectsTheRowsDatasetsSelects) {
  using Rows = std::pair<int64_t, int64_t>;
  // Each expectation is datasets' _rel_to_abs_instr worked by hand: round(b * n / 100), then
  // n + b for a negative b, then min(b, n).
  EXPECT_EQ(rows_of("train", 41), Rows(0, 41));
  EXPECT_EQ(rows_of("train[:10%]", 41), Rows(0, 4));     // round(4.1)
  EXPECT_EQ(rows_of("train[-10%:]", 41), Rows(37, 41));  // round(-4.1) = -4
  EXPECT_EQ(rows_of("train[10:20]", 41), Rows(10, 20));
  EXPECT_EQ(rows_of("train[:-5]", 41), Rows(0, 36));
  EXPECT_EQ(rows_of("train[25%:75%]", 10), Rows(2, 8));  // round(2.5) = 2, round(7.5) = 8: halves to even
  EXPECT_EQ(rows_of("train[10:20%]", 50), Rows(5, 10));  // one % makes both percentages
  EXPECT_EQ(rows_of("train[50:10]", 41), Rows(41, 10));  // empty
  EXPECT_EQ(rows_of("train[-100:]", 41), Rows(0, 41));
  EXPECT_EQ(rows_of("train[1_0:]", 41), Rows(10, 41));
  EXPECT_EQ(rows_of("train[:]", 7), Rows(0, 7));
}

TEST(DatasetSplit, RefusesWhatALocalFileCannotGive) {
  EXPECT_EQ(parse_split("validation[:10%]").problem,
            "'validation[:10%]': a local file has the one split 'train' (as datasets reads it); write e.g. "
            "train[:10%]");
  EXPECT_EQ(parse_split("train[:10%]+train[-10%:]").problem,
            "'train[:10%]+train[-10%:]' joins several splits, which qtrain does not read; give one, e.g. train[:10%]");
  EXPECT_EQ(parse_split("train[:10%](pct1_dropremainder)").problem,
            "'train[:10%](pct1_dropremainder)': the rounding 'pct1_dropremainder' is not supported; leave it out "
            "(percentages round to the closest row)");
  EXPECT_EQ(parse_split("train[::2]").problem,
            "'train[::2]' is not a split as datasets writes it; write e.g. train, train[:10%] or train[100:200]");
  EXPECT_EQ(parse_split("train[:150%]").problem, "'train[:150%]': percent bounds lie between -100% and 100%");
  EXPECT_EQ(parse_split("train[:99999999999999999999]").problem,
            "'train[:99999999999999999999]': a bound is out of range");
}

}  // namespace
}  // namespace qtrain::engine::config
