// See progress_line.h.
#include "engine/train/progress_line.h"

#include <unistd.h>

#include <algorithm>

namespace qtrain::engine::train {
namespace {

// Note [Progress lines]
// A step that can take minutes (tokenizing a dataset) shows a line on stderr, so that stdout keeps
// only the results. Nothing is shown before the step has run for 1 s, so a quick step prints only
// its summary. On a terminal the line is rewritten in place ("\r") twice a second and cleared when
// the step ends; in a log (stderr redirected) a plain line is written every 10 s instead, so that
// the log does not fill with refreshes.
using Duration = std::chrono::steady_clock::duration;
constexpr Duration kQuiet = std::chrono::seconds(1);
constexpr Duration kTerminalPeriod = std::chrono::milliseconds(500);
constexpr Duration kLogPeriod = std::chrono::seconds(10);

}  // namespace

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf,
                sizeof buf,
                "%lld:%02lld:%02lld",
                static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60),
                static_cast<long long>(s % 60));
  return buf;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (auto i = static_cast<int64_t>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return n < 0 ? "-" + digits : digits;
}

ProgressLine::ProgressLine(std::string label, std::string unit, std::FILE* out, bool terminal, Clock now)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      out_(out),
      terminal_(terminal),
      now_(std::move(now)),
      start_(now_()),
      next_(start_ + (terminal_ ? kQuiet : kLogPeriod)) {}

ProgressLine::ProgressLine(std::string label, std::string unit)
    : ProgressLine(std::move(label), std::move(unit), stderr, isatty(fileno(stderr)) != 0) {}

ProgressLine::~ProgressLine() {
  if (shown_ == 0) return;
  std::fprintf(out_, "\r%*s\r", static_cast<int>(shown_), "");
  std::fflush(out_);
}

void ProgressLine::update(int64_t done, int64_t total) {
  const auto now = now_();
  if (now < next_) return;
  next_ = now + (terminal_ ? kTerminalPeriod : kLogPeriod);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double left = rate > 0 ? static_cast<double>(std::max<int64_t>(0, total - done)) / rate : 0.0;
  const std::string line = label_ + ": " + with_commas(done) + "/" + with_commas(total) + " " + unit_ + " (" +
                           with_commas(static_cast<int64_t>(rate)) + " " + unit_ + "/s, " + clock_text(elapsed) +
                           " < " + clock_text(left) + ")";
  if (terminal_) {
    // Padded over a longer previous line.
    std::fprintf(out_, "\r%-*s", static_cast<int>(std::max(shown_, line.size())), line.c_str());
    shown_ = std::max(shown_, line.size());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace qtrain::engine::train
