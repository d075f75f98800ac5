// See base_tensors.h.
#include "engine/model/base_tensors.h"

#include <c10/util/Exception.h>

namespace qtrain::engine::model {

std::vector<at::Tensor> layer_base_tensors(const DecoderLayer& layer) {
  std::vector<at::Tensor> tensors;
  for (const auto* lin : layer.weight_linears()) {
    const auto t = lin->base_tensors();
    tensors.insert(tensors.end(), t.begin(), t.end());
  }
  return tensors;
}

void bind_layer_base_tensors(DecoderLayer& layer, const std::vector<at::Tensor>& tensors) {
  size_t next = 0;
  for (auto* lin : layer.weight_linears()) {
    const size_t count = lin->base_tensors().size();
    TORCH_INTERNAL_ASSERT(next + count <= tensors.size());
    lin->rebind_base_tensors(std::vector<at::Tensor>(tensors.begin() + next, tensors.begin() + next + count));
    next += count;
  }
  TORCH_INTERNAL_ASSERT(next == tensors.size());
}

}  // namespace qtrain::engine::model
