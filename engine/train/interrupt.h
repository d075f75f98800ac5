// Turns SIGINT and SIGTERM into a flag the training loop polls between steps, so that Ctrl-C (or
// a scheduler's SIGTERM) ends a run with a saved checkpoint instead of losing it. RAII: the
// previous handlers come back when the guard goes.
#pragma once

#include <csignal>

namespace qtrain::engine::train {

class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The signal received since construction, or 0.
  int received() const;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

}  // namespace qtrain::engine::train
