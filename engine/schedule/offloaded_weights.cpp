// See offloaded_weights.h.
#include "engine/schedule/offloaded_weights.h"

#include <ATen/ATen.h>

#include "offload/prefetch_depth.h"

namespace qtrain::engine::schedule {

OffloadedWeights::OffloadedWeights(model::CausalLM& model,
                                   const OffloadOptions& options,
                                   std::shared_ptr<offload::CopyEngine> engine)
    : model_(model), depth_(options.prefetch_depth), store_(std::move(engine)) {
  const int64_t n = static_cast<int64_t>(model.layers().size());
  offload::check_prefetch_depth(depth_);
  TORCH_CHECK(!options.layers.empty(), "no layers to offload");
  for (const int64_t l : options.layers) {
    TORCH_CHECK(l >= 0 && l < n, "cannot offload layer ", l, ": the model has layers 0..", n - 1);
    TORCH_CHECK(offloaded_.insert(l).second, "layer ", l, " is listed twice for offloading");
  }
  at::NoGradGuard no_grad;
  for (const int64_t l : offloaded_) {
    std::vector<at::Tensor> tensors;
    for (const auto* lin : model_.layers()[l].weight_linears()) {
      const auto t = lin->base_tensors();
      tensors.insert(tensors.end(), t.begin(), t.end());
    }
    store_.add(l, tensors);
    bind(l, store_.host_tensors(l));  // drops the device copies
  }
  // One slot for the layer computing and one per layer in flight; never more than there are layers.
  ring_ =
      std::make_unique<offload::SlotRing>(store_, offload::slots_for(static_cast<int64_t>(offloaded_.size()), depth_));
}

void OffloadedWeights::bind(int64_t layer, const std::vector<at::Tensor>& tensors) {
  size_t next = 0;
  for (auto* lin : model_.layers()[layer].weight_linears()) {
    const size_t count = lin->base_tensors().size();
    TORCH_INTERNAL_ASSERT(next + count <= tensors.size());
    lin->rebind_base_tensors(std::vector<at::Tensor>(tensors.begin() + next, tensors.begin() + next + count));
    next += count;
  }
  TORCH_INTERNAL_ASSERT(next == tensors.size());
}

void OffloadedWeights::plan_acquisitions(const std::vector<int64_t>& order) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [layer, ticket] : tickets_) ring_->cancel(ticket);
  tickets_.clear();
  order_.clear();
  for (const int64_t l : order) {
    if (offloaded_.count(l)) order_.push_back(l);
  }
  cursor_ = 0;
  prefetch_ahead();
}

void OffloadedWeights::prefetch_ahead() {
  // The next depth_ distinct offloaded layers the compute will want, not counting those it holds.
  std::vector<int64_t> window;
  for (size_t p = cursor_; p < order_.size() && static_cast<int64_t>(window.size()) < depth_; ++p) {
    const int64_t l = order_[p];
    if (leases_.count(l) || std::find(window.begin(), window.end(), l) != window.end()) continue;
    window.push_back(l);
  }
  // First keep the layers some slot still holds (no copy), then copy the others into free slots.
  for (const int64_t l : window) {
    if (!tickets_.count(l) && ring_->has(l)) tickets_[l] = ring_->prefetch(l);
  }
  for (const int64_t l : window) {
    if (tickets_.count(l)) continue;
    if (ring_->unreserved_slots() == 0) break;
    tickets_[l] = ring_->prefetch(l);
  }
}

void OffloadedWeights::acquire(int64_t layer) {
  if (!offloaded_.count(layer)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t p = cursor_; p < order_.size(); ++p) {
    if (order_[p] == layer) {
      cursor_ = p + 1;
      break;
    }
  }
  // A layer without a ticket (not announced, or no slot was free ahead of time) is fetched now;
  // one with a ticket is acquired through it, so a slot refilled meanwhile is an error.
  const auto it = tickets_.find(layer);
  const offload::SlotTicket ticket = it != tickets_.end() ? it->second : ring_->prefetch(layer);
  if (it != tickets_.end()) {
    tickets_.erase(it);
  } else {
    ++unprepared_;
  }
  auto lease = ring_->acquire(ticket);
  bind(layer, lease.tensors);
  leases_.emplace(layer, std::move(lease));
  prefetch_ahead();
}

void OffloadedWeights::release(int64_t layer) {
  if (!offloaded_.count(layer)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = leases_.find(layer);
  TORCH_CHECK(it != leases_.end(), "layer ", layer, " is released but was not acquired");
  const auto lease = std::move(it->second);
  leases_.erase(it);
  bind(layer, store_.host_tensors(layer));
  ring_->release(lease);
  prefetch_ahead();
}

OffloadStats OffloadedWeights::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {static_cast<int64_t>(offloaded_.size()),
          store_.total_bytes(),
          ring_->slot_bytes(),
          ring_->num_slots(),
          ring_->stats(),
          unprepared_};
}

}  // namespace qtrain::engine::schedule
