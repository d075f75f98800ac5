// See adapters_off.h and Note [Adapters off] there.
#include "engine/lora/adapters_off.h"

namespace qtrain::engine::lora {
namespace {

thread_local bool on = true;

}  // namespace

bool adapters_on() {
  return on;
}

AdaptersOff::AdaptersOff() : was_on_(on) {
  on = false;
}

AdaptersOff::~AdaptersOff() {
  on = was_on_;
}

}  // namespace qtrain::engine::lora
