// The host copies of offloaded layers: each layer's weights (still quantized) packed into one
// blob in memory its copy engine reads at full speed (pinned, on a GPU). Built once before
// training and read-only afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "offload/blob_layout.h"
#include "offload/copy_engine.h"

namespace qtrain::offload {

class HostStore {
 public:
  explicit HostStore(std::shared_ptr<CopyEngine> engine) : engine_(std::move(engine)) {}

  // Copies `tensors` (on any device) into a new host blob for `layer`.
  void add(int64_t layer, const std::vector<at::Tensor>& tensors);

  bool contains(int64_t layer) const { return layers_.count(layer) > 0; }
  const BlobLayout& layout(int64_t layer) const { return entry(layer).layout; }
  // uint8 [layout(layer).total_bytes()] on the host.
  const at::Tensor& blob(int64_t layer) const { return entry(layer).blob; }
  // Views of the layer's tensors in its host blob.
  std::vector<at::Tensor> host_tensors(int64_t layer) const { return entry(layer).layout.views(entry(layer).blob); }
  std::vector<int64_t> layers() const;
  int64_t max_blob_bytes() const;
  int64_t total_bytes() const;
  CopyEngine& engine() const { return *engine_; }

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
