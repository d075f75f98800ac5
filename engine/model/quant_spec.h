// How the base model's linear weights are stored while training: kept in float, or quantized
// on load to NF4/FP4 (blocksize, double quantization) or LLM.int8(). Embeddings, norms and the
// output head are never quantized.
#pragma once

#include <cstdint>

#include "ops/linear_int8.h"
#include "ops/quant/codebook.h"

namespace qtrain::engine::model {

struct QuantSpec {
  enum class Kind : uint8_t { none, nf4, fp4, int8 };
  Kind kind = Kind::none;
  int64_t blocksize = 64;
  bool double_quant = false;
  double int8_threshold = 6.0;
  ops::Int8Compute int8_compute = ops::Int8Compute::dequantize;
};

}  // namespace qtrain::engine::model
