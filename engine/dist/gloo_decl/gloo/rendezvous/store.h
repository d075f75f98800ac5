// Declaration-only stand-in for Gloo's header of this name. See Note [Gloo declarations]
// (engine/dist/gloo_backend.cpp). c10d's GlooStore derives from this class and overrides these
// four members, so they must be declared; qtrain never makes a GlooStore.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo::rendezvous {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) = 0;
};

}  // namespace gloo::rendezvous
