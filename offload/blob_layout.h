// A layer's weights as one blob of bytes: every tensor at an aligned offset in a single buffer,
// so that moving a layer between host and device is one copy, and a device slot is one
// allocation reused by every layer that passes through it. offload/ knows layers only as such
// blobs; which tensors make up a layer is the engine's business.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace qtrain::offload {

// Every tensor starts at a multiple of this (the CUDA allocator's own granularity, and enough
// for vectorized loads of any dtype).
constexpr int64_t kBlobAlignment = 256;

// Bytes of a blob holding tensors of these sizes (each rounded up to kBlobAlignment).
int64_t blob_bytes(const std::vector<int64_t>& tensor_nbytes);

struct BlobEntry {
  int64_t offset = 0;  // bytes from the start of the blob
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> shape;
  int64_t nbytes() const;
};

class BlobLayout {
 public:
  BlobLayout() = default;
  // The layout of these tensors (contiguous or not; only dtype and shape matter), in order.
  static BlobLayout of(const std::vector<at::Tensor>& tensors);

  const std::vector<BlobEntry>& entries() const { return entries_; }
  int64_t total_bytes() const { return total_bytes_; }

  // Copies `tensors` (which must match the layout) into `blob` (uint8 [>= total_bytes], any device).
  void pack(const std::vector<at::Tensor>& tensors, const at::Tensor& blob) const;
  // Views of every tensor inside `blob`; they share its storage (and its version counter).
  std::vector<at::Tensor> views(const at::Tensor& blob) const;

 private:
  std::vector<BlobEntry> entries_;
  int64_t total_bytes_ = 0;
};

}  // namespace qtrain::offload
