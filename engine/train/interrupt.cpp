// See interrupt.h.
#include "engine/train/interrupt.h"

namespace qtrain::engine::train {
namespace {
volatile std::sig_atomic_t g_signal = 0;  // a signal handler can only touch a sig_atomic_t
void on_signal(int sig) {
  g_signal = sig;
}
}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int InterruptGuard::received() const {
  return g_signal;
}

}  // namespace qtrain::engine::train
