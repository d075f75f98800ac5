// See streamed_weights.h.
#include "engine/schedule/streamed_weights.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "engine/model/base_tensors.h"

namespace qtrain::engine::schedule {

StreamedWeights::StreamedWeights(model::CausalLM& model,
                                 const ResidencyPlan& plan,
                                 std::shared_ptr<offload::SlotSource> source)
    : model_(model), plan_(plan), source_(std::move(source)) {
  TORCH_CHECK(plan_.num_layers() == static_cast<int64_t>(model_.layers().size()),
              "the residency plan has ",
              plan_.num_layers(),
              " layers, the model ",
              model_.layers().size());
  TORCH_CHECK(plan_.weight_slots() > 0, "the residency plan streams no layer");
  at::NoGradGuard no_grad;
  for (const int64_t l : plan_.streamed_layers()) {
    model::bind_layer_base_tensors(model_.layers()[l], source_->resting_tensors(l));
  }
  ring_ = std::make_unique<offload::SlotRing>(*source_, plan_.weight_slots());
}

void StreamedWeights::plan_acquisitions(const std::vector<int64_t>& order) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [layer, ticket] : tickets_) ring_->cancel(ticket);
  tickets_.clear();
  order_.clear();
  for (const int64_t l : order) {
    if (plan_.streamed(l)) order_.push_back(l);
  }
  cursor_ = 0;
  prefetch_ahead();
}

void StreamedWeights::prefetch_ahead() {
  // The next prefetch_depth distinct streamed layers the compute will want, not counting those it
  // holds.
  std::vector<int64_t> window;
  for (size_t p = cursor_; p < order_.size() && static_cast<int64_t>(window.size()) < plan_.prefetch_depth(); ++p) {
    const int64_t l = order_[p];
    if (leases_.count(l) || std::find(window.begin(), window.end(), l) != window.end()) continue;
    window.push_back(l);
  }
  // First keep the layers some slot still holds (no fill), then fill free slots with the others.
  for (const int64_t l : window) {
    if (!tickets_.count(l) && ring_->has(l)) tickets_[l] = ring_->prefetch(l);
  }
  for (const int64_t l : window) {
    if (tickets_.count(l)) continue;
    if (ring_->unreserved_slots() == 0) break;
    tickets_[l] = ring_->prefetch(l);
  }
}

void StreamedWeights::acquire(int64_t layer) {
  if (!plan_.streamed(layer)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!leases_.count(layer), "layer ", layer, " is acquired twice");
  for (size_t p = cursor_; p < order_.size(); ++p) {
    if (order_[p] == layer) {
      cursor_ = p + 1;
      break;
    }
  }
  // A layer without a ticket (not announced, or no slot was free ahead of time) is filled now;
  // one with a ticket is acquired through it, so a slot refilled meanwhile is an error.
  const auto it = tickets_.find(layer);
  const offload::SlotTicket ticket = it != tickets_.end() ? it->second : ring_->prefetch(layer);
  if (it != tickets_.end()) {
    tickets_.erase(it);
  } else {
    ++unprepared_;
  }
  auto lease = ring_->acquire(ticket);
  model::bind_layer_base_tensors(model_.layers()[layer], lease.tensors);
  leases_.emplace(layer, std::move(lease));
  prefetch_ahead();
}

void StreamedWeights::release(int64_t layer) {
  if (!plan_.streamed(layer)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = leases_.find(layer);
  TORCH_CHECK(it != leases_.end(), "layer ", layer, " is released but was not acquired");
  const auto lease = std::move(it->second);
  leases_.erase(it);
  model::bind_layer_base_tensors(model_.layers()[layer], source_->resting_tensors(layer));
  ring_->release(lease);
  prefetch_ahead();
}

StreamStats StreamedWeights::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {static_cast<int64_t>(plan_.streamed_layers().size()),
          source_->held_bytes(),
          ring_->slot_bytes(),
          ring_->num_slots(),
          ring_->stats(),
          unprepared_};
}

}  // namespace qtrain::engine::schedule
