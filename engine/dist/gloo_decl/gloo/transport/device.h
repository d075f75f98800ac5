// Declaration-only stand-in for Gloo's header of this name. See Note [Gloo declarations]
// (engine/dist/gloo_backend.cpp): ProcessGroupGloo.hpp holds these only through smart pointers.
#pragma once

namespace gloo::transport {

class Device;
class UnboundBuffer;

}  // namespace gloo::transport
