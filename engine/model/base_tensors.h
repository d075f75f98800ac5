// A decoder layer's quantized base weights as one list of tensors, in weight_linears() order:
// what offload and the sharded base move as one blob (offload/blob_layout.h), and the way they
// point the layer at the copy it computes with (a device slot) or the one it rests in.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/model/decoder_layer.h"

namespace qtrain::engine::model {

// Every base linear's base_tensors(), concatenated.
std::vector<at::Tensor> layer_base_tensors(const DecoderLayer& layer);

// Points every base linear at its part of `tensors` (as layer_base_tensors lists them, with the
// same dtypes and shapes); the tensors it held are dropped.
void bind_layer_base_tensors(DecoderLayer& layer, const std::vector<at::Tensor>& tensors);

}  // namespace qtrain::engine::model
