// Declaration-only stand-in for Gloo's header of this name. See Note [Gloo declarations]
// (engine/dist/gloo_backend.cpp). ProcessGroupGloo::setTimeout (inline) names this member; its
// definition is the one exported by libtorch_cpu.
#pragma once

#include <chrono>

namespace gloo {

class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};

}  // namespace gloo
