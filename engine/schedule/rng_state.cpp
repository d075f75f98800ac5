// See rng_state.h.
#include "engine/schedule/rng_state.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

namespace qtrain::engine::schedule {

at::Generator default_generator(const at::Device& device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

at::Tensor rng_state(const at::Device& device) {
  auto gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const at::Device& device, const at::Tensor& state) {
  auto gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

RngStateGuard::RngStateGuard(const at::Device& device, const at::Tensor& state) : gen_(default_generator(device)) {
  std::lock_guard<std::mutex> lock(gen_.mutex());
  saved_ = gen_.get_state();
  gen_.set_state(state);
}

RngStateGuard::~RngStateGuard() {
  std::lock_guard<std::mutex> lock(gen_.mutex());
  gen_.set_state(saved_);
}

}  // namespace qtrain::engine::schedule
