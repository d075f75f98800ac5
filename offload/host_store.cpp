// See host_store.h.
#include "offload/host_store.h"

#include <ATen/ATen.h>

namespace qtrain::offload {

void HostStore::add(int64_t layer, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(!contains(layer), "layer ", layer, " is already in the host store");
  Entry e{BlobLayout::of(tensors), {}};
  e.blob = engine_->host_buffer(e.layout.total_bytes());
  e.layout.pack(tensors, e.blob);
  layers_.emplace(layer, std::move(e));
}

const HostStore::Entry& HostStore::entry(int64_t layer) const {
  const auto it = layers_.find(layer);
  TORCH_CHECK(it != layers_.end(), "layer ", layer, " is not in the host store (not offloaded)");
  return it->second;
}

int64_t HostStore::max_fill_bytes() const {
  int64_t m = 0;
  for (const auto& [layer, e] : layers_) m = std::max(m, e.layout.total_bytes());
  return m;
}

int64_t HostStore::total_bytes() const {
  int64_t total = 0;
  for (const auto& [layer, e] : layers_) total += e.layout.total_bytes();
  return total;
}

}  // namespace qtrain::offload
