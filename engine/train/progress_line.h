// The progress line of a long step on stderr ("data: train.jsonl: 12,345/100,000 rows (3,210
// rows/s, 0:00:03 < 0:00:27)"), and the elapsed < remaining clock the trainer's step lines use.
// See Note [Progress lines].
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace qtrain::engine::train {

// Seconds as h:mm:ss.
std::string clock_text(double seconds);

// 1234567 -> "1,234,567".
std::string with_commas(int64_t n);

class ProgressLine {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `label`: what is under way ("data: train.jsonl"); `unit`: what is counted ("rows").
  // `terminal`: whether `out` is a terminal (refreshed in place) or a log (one line now and then).
  ProgressLine(
      std::string label, std::string unit, std::FILE* out, bool terminal, Clock now = std::chrono::steady_clock::now);
  // On stderr, refreshed in place when stderr is a terminal.
  ProgressLine(std::string label, std::string unit);
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  // Clears a line left on the terminal, so that the step's summary takes its place.
  ~ProgressLine();

  // `done` of `total` units so far; prints only when a line is due.
  void update(int64_t done, int64_t total);

 private:
  std::string label_;
  std::string unit_;
  std::FILE* out_;
  bool terminal_;
  Clock now_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point next_;
  size_t shown_ = 0;  // characters of the line on the terminal
};

}  // namespace qtrain::engine::train
