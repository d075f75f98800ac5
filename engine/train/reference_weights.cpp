// See reference_weights.h and Note [Reference adapter] there.
#include "engine/train/reference_weights.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace qtrain::engine::train {

ReferenceWeights::ReferenceWeights(std::vector<at::Tensor> params) : params_(std::move(params)) {
  at::NoGradGuard no_grad;
  for (const auto& p : params_) copies_.push_back(p.detach().clone());
}

int64_t ReferenceWeights::nbytes() const {
  int64_t n = 0;
  for (const auto& c : copies_) n += static_cast<int64_t>(c.nbytes());
  return n;
}

ReferenceWeightsOn::ReferenceWeightsOn(const ReferenceWeights& weights)
    : weights_(weights), grad_was_enabled_(at::GradMode::is_enabled()) {
  const auto& params = weights_.params();
  trained_.reserve(params.size());
  try {
    for (size_t i = 0; i < params.size(); ++i) {
      trained_.push_back(params[i].variable_data());
      params[i].set_data(weights_.copies()[i]);
    }
  } catch (...) {
    // The destructor will not run: put back what was swapped.
    for (size_t i = 0; i < trained_.size(); ++i) params[i].set_data(trained_[i]);
    throw;
  }
  at::GradMode::set_enabled(false);
}

ReferenceWeightsOn::~ReferenceWeightsOn() {
  const auto& params = weights_.params();
  for (size_t i = 0; i < params.size(); ++i) params[i].set_data(trained_[i]);
  at::GradMode::set_enabled(grad_was_enabled_);
}

}  // namespace qtrain::engine::train
