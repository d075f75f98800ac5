// One linear layer of the base model: its frozen weight (float, 4-bit or int8), an optional
// frozen bias, and an optional trainable LoRA adapter on top.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/lora/lora_linear.h"
#include "engine/model/quant_spec.h"
#include "ops/quant/int8.h"
#include "ops/quant/kbit.h"

namespace qtrain::engine::model {

using BaseWeight = std::variant<at::Tensor, ops::Packed4bit, ops::Int8Weight>;

struct LinearLayer {
  std::string name;  // Hugging Face module path, e.g. "model.layers.0.self_attn.q_proj"
  int64_t in_features = 0;
  int64_t out_features = 0;
  BaseWeight weight;  // dense: [out, in] in the compute dtype
  std::optional<at::Tensor> bias;
  std::optional<lora::LoraAdapter> lora;
  QuantSpec quant;

  // Builds the layer from a float weight [out, in], quantizing it as `quant` says. `dtype` is
  // the compute dtype a dense weight and the bias are kept in.
  static LinearLayer make(std::string name,
                          const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias,
                          const QuantSpec& quant,
                          at::ScalarType dtype);
  // What `make` builds from a weight [out, in] of `source_dtype`, without reading it: the base
  // weight's tensors are meta tensors of the sizes and dtypes `make` gives them (a 4-bit nested
  // offset is 0), for a layer whose bytes another rank reads and sends (Note [Sharded base] in
  // engine/dist/sharded_base.h). The bias is real.
  static LinearLayer placeholder(std::string name,
                                 int64_t out_features,
                                 int64_t in_features,
                                 at::ScalarType source_dtype,
                                 const std::optional<at::Tensor>& bias,
                                 const QuantSpec& quant,
                                 at::ScalarType dtype);
  // From a weight already in its stored form (e.g. read quantized from a checkpoint).
  static LinearLayer from_weight(std::string name,
                                 BaseWeight weight,
                                 std::optional<at::Tensor> bias,
                                 const QuantSpec& quant);

  // x: [..., in] -> [..., out] in x's dtype: base(x) + lora(x).
  at::Tensor forward(const at::Tensor& x, bool training) const;
  // The base weight as a float tensor [out, in] in `dtype` (for merging and tests).
  at::Tensor dense_weight(at::ScalarType dtype) const;
  // Bytes of the frozen base weight as stored (packed codes and scales for quantized weights).
  int64_t base_nbytes() const;
  // The tensors the frozen base weight is stored in, in a fixed order: 4-bit: packed codes, then
  // absmax or (double quantization) qabsmax, absmax2, code; int8: CB, SCB; dense: the weight.
  // The bias is not among them. This is what offload/ moves between host and device.
  std::vector<at::Tensor> base_tensors() const;
  // Points the base weight at other storage holding the same values (a device slot, or the host
  // store): `tensors` in base_tensors() order, with the same dtypes and shapes.
  void rebind_base_tensors(const std::vector<at::Tensor>& tensors);
};

}  // namespace qtrain::engine::model
