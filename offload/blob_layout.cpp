// See blob_layout.h.
#include "offload/blob_layout.h"

#include <ATen/ATen.h>

namespace qtrain::offload {
namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + kBlobAlignment - 1) / kBlobAlignment * kBlobAlignment;
}

}  // namespace

int64_t blob_bytes(const std::vector<int64_t>& tensor_nbytes) {
  int64_t total = 0;
  for (const int64_t n : tensor_nbytes) total += aligned(n);
  return total;
}

int64_t BlobEntry::nbytes() const {
  int64_t n = static_cast<int64_t>(c10::elementSize(dtype));
  for (const int64_t s : shape) n *= s;
  return n;
}

BlobLayout BlobLayout::of(const std::vector<at::Tensor>& tensors) {
  BlobLayout layout;
  for (const auto& t : tensors) {
    TORCH_CHECK(t.defined(), "an offloaded layer has an undefined tensor (at position ", layout.entries_.size(), ")");
    BlobEntry e{layout.total_bytes_, t.scalar_type(), t.sizes().vec()};
    layout.total_bytes_ += aligned(e.nbytes());
    layout.entries_.push_back(std::move(e));
  }
  return layout;
}

void BlobLayout::pack(const std::vector<at::Tensor>& tensors, const at::Tensor& blob) const {
  TORCH_CHECK(tensors.size() == entries_.size(),
              "packing ",
              tensors.size(),
              " tensors into a blob laid out for ",
              entries_.size());
  const auto dst = views(blob);
  for (size_t i = 0; i < tensors.size(); ++i) {
    TORCH_CHECK(tensors[i].scalar_type() == entries_[i].dtype && tensors[i].sizes().vec() == entries_[i].shape,
                "tensor ",
                i,
                " is ",
                tensors[i].scalar_type(),
                " ",
                tensors[i].sizes(),
                " but the blob layout has ",
                entries_[i].dtype,
                " ",
                at::IntArrayRef(entries_[i].shape));
    dst[i].copy_(tensors[i]);
  }
}

std::vector<at::Tensor> BlobLayout::views(const at::Tensor& blob) const {
  TORCH_CHECK(
      blob.scalar_type() == at::kByte && blob.dim() == 1 && blob.is_contiguous() && blob.numel() >= total_bytes_,
      "a blob must be a contiguous uint8 vector of at least ",
      total_bytes_,
      " bytes, got ",
      blob.scalar_type(),
      " ",
      blob.sizes());
  std::vector<at::Tensor> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) {
    // narrow + view(dtype) keeps the view tied to the blob's storage and version counter.
    out.push_back(blob.narrow(0, e.offset, e.nbytes()).view(e.dtype).view(e.shape));
  }
  return out;
}

}  // namespace qtrain::offload
