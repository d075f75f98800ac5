// The default random generator of a device, read and set as a state tensor: what a checkpointed
// layer replays in its recompute (so LoRA dropout draws the same mask) and what a training
// checkpoint saves for an exact resume.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace qtrain::engine::schedule {

// The generator ops on `device` draw from by default.
at::Generator default_generator(const at::Device& device);
at::Tensor rng_state(const at::Device& device);
void set_rng_state(const at::Device& device, const at::Tensor& state);

// Sets the generator to `state` for its lifetime and puts the previous state back afterwards
// (torch.random.fork_rng), so the recompute draws the forward's numbers without shifting
// anything drawn later.
class RngStateGuard {
 public:
  RngStateGuard(const at::Device& device, const at::Tensor& state);
  ~RngStateGuard();
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;

 private:
  at::Generator gen_;
  at::Tensor saved_;
};

}  // namespace qtrain::engine::schedule
