// The host copies of offloaded layers: each layer's weights (still quantized) packed into one
// blob in memory its copy engine reads at full speed (pinned, on a GPU). Built once before
// training and read-only afterwards; it fills the device slots by the engine's copies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "offload/blob_layout.h"
#include "offload/copy_engine.h"
#include "offload/slot_source.h"

namespace qtrain::offload {

class HostStore final : public SlotSource {
 public:
  explicit HostStore(std::shared_ptr<CopyEngine> engine) : engine_(std::move(engine)) {}

  // Copies `tensors` (on any device) into a new host blob for `layer`.
  void add(int64_t layer, const std::vector<at::Tensor>& tensors);

  bool contains(int64_t layer) const { return layers_.count(layer) > 0; }
  // uint8 [layout(layer).total_bytes()] on the host.
  const at::Tensor& blob(int64_t layer) const { return entry(layer).blob; }
  int64_t total_bytes() const;

  // SlotSource: copies on the engine; a layer rests in its host blob.
  at::Tensor device_buffer(int64_t bytes) override { return engine_->device_buffer(bytes); }
  const BlobLayout& layout(int64_t layer) const override { return entry(layer).layout; }
  int64_t fill_bytes(int64_t layer) const override { return entry(layer).layout.total_bytes(); }
  int64_t max_fill_bytes() const override;
  FencePtr fill(int64_t layer, const at::Tensor& dst, const FencePtr& after) override {
    return engine_->copy(blob(layer), dst, after);
  }
  void compute_wait(const FencePtr& fence) override { engine_->compute_wait(fence); }
  FencePtr compute_fence() override { return engine_->compute_fence(); }
  // Views of the layer's tensors in its host blob.
  std::vector<at::Tensor> resting_tensors(int64_t layer) const override {
    return entry(layer).layout.views(entry(layer).blob);
  }
  int64_t held_bytes() const override { return total_bytes(); }

 private:
  struct Entry {
    BlobLayout layout;
    at::Tensor blob;
  };
  const Entry& entry(int64_t layer) const;

  std::shared_ptr<CopyEngine> engine_;
  std::map<int64_t, Entry> layers_;
};

}  // namespace qtrain::offload
