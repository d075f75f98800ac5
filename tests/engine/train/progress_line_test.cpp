// Tests for engine/train/progress_line: nothing within the first second, in-place refreshes every
// half second on a terminal (cleared at the end), a plain line every 10 s in a log, and the
// numbers of the line (rate, elapsed < remaining, thousands separators).
#include "engine/train/progress_line.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace qtrain::engine::train {
namespace {

using namespace std::chrono_literals;

// What was written to a temporary file.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<char>(c));
  return out;
}

struct FakeClock {
  std::chrono::steady_clock::time_point t{};
  ProgressLine::Clock fn() {
    return [this] { return t; };
  }
};

TEST(ProgressLine, TerminalRefreshesInPlaceAfterOneSecondAndClearsAtTheEnd) {
  std::FILE* f = std::tmpfile();
  FakeClock clock;
  {
    ProgressLine line("data: t.jsonl", "rows", f, /*terminal=*/true, clock.fn());
    clock.t += 900ms;
    line.update(900, 10000);
    EXPECT_EQ(contents(f), "");  // a quick step prints nothing
    clock.t += 1100ms;           // 2 s: 2,500 rows at 1,250 rows/s, 6 s left
    line.update(2500, 10000);
    clock.t += 200ms;  // within half a second of the last refresh
    line.update(2700, 10000);
    clock.t += 300ms;  // 2.5 s
    line.update(10000, 10000);
  }
  const std::string first = "data: t.jsonl: 2,500/10,000 rows (1,250 rows/s, 0:00:02 < 0:00:06)";
  const std::string second = "data: t.jsonl: 10,000/10,000 rows (4,000 rows/s, 0:00:02 < 0:00:00)";
  EXPECT_EQ(contents(f), "\r" + first + "\r" + second + "\r" + std::string(second.size(), ' ') + "\r");
  std::fclose(f);
}

TEST(ProgressLine, LogGetsAPlainLineEveryTenSeconds) {
  std::FILE* f = std::tmpfile();
  FakeClock clock;
  {
    ProgressLine line("data: t.jsonl", "rows", f, /*terminal=*/false, clock.fn());
    for (int s = 1; s <= 25; ++s) {
      clock.t += 1s;
      line.update(s * 1000, 100000);
    }
  }
  EXPECT_EQ(contents(f),
            "data: t.jsonl: 10,000/100,000 rows (1,000 rows/s, 0:00:10 < 0:01:30)\n"
            "data: t.jsonl: 20,000/100,000 rows (1,000 rows/s, 0:00:20 < 0:01:20)\n");
  std::fclose(f);
}

TEST(ProgressLine, NumbersAndClock) {
  EXPECT_EQ(with_commas(0), "0");
  EXPECT_EQ(with_commas(999), "999");
  EXPECT_EQ(with_commas(1000), "1,000");
  EXPECT_EQ(with_commas(1234567), "1,234,567");
  EXPECT_EQ(with_commas(-1234), "-1,234");
  EXPECT_EQ(clock_text(0), "0:00:00");
  EXPECT_EQ(clock_text(3723.9), "1:02:03");
  EXPECT_EQ(clock_text(-5), "0:00:00");
}

}  // namespace
}  // namespace qtrain::engine::train
