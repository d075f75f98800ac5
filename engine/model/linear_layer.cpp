// See linear_layer.h.
#include "engine/model/linear_layer.h"

#include <ATen/ATen.h>

#include "engine/lora/adapters_off.h"
#include "ops/linear_4bit.h"
#include "ops/linear_dense.h"

namespace qtrain::engine::model {
namespace {

ops::QuantType four_bit_type(const QuantSpec& quant) {
  return quant.kind == QuantSpec::Kind::nf4 ? ops::QuantType::nf4 : ops::QuantType::fp4;
}

}  // namespace

LinearLayer LinearLayer::make(std::string name,
                              const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias,
                              const QuantSpec& quant,
                              at::ScalarType dtype) {
  TORCH_CHECK(weight.dim() == 2, name, ".weight must be 2-D [out, in], got ", weight.sizes());
  BaseWeight stored;
  switch (quant.kind) {
    case QuantSpec::Kind::none:
      stored = weight.to(dtype).contiguous();
      break;
    case QuantSpec::Kind::nf4:
    case QuantSpec::Kind::fp4:
      stored = ops::quantize_4bit(weight.contiguous(), four_bit_type(quant), quant.blocksize, quant.double_quant);
      break;
    case QuantSpec::Kind::int8:
      stored = ops::Int8Weight::from_float(weight.contiguous());
      break;
  }
  return from_weight(std::move(name), std::move(stored), bias ? std::optional(bias->to(dtype)) : std::nullopt, quant);
}

LinearLayer LinearLayer::placeholder(std::string name,
                                     int64_t out_features,
                                     int64_t in_features,
                                     at::ScalarType source_dtype,
                                     const std::optional<at::Tensor>& bias,
                                     const QuantSpec& quant,
                                     at::ScalarType dtype) {
  BaseWeight stored;
  switch (quant.kind) {
    case QuantSpec::Kind::none:
      stored = at::empty({out_features, in_features}, at::TensorOptions(dtype).device(at::kMeta));
      break;
    case QuantSpec::Kind::nf4:
    case QuantSpec::Kind::fp4:
      stored = ops::placeholder_4bit(
          {out_features, in_features}, source_dtype, four_bit_type(quant), quant.blocksize, quant.double_quant);
      break;
    case QuantSpec::Kind::int8:
      stored = ops::Int8Weight::placeholder(out_features, in_features);
      break;
  }
  return from_weight(std::move(name), std::move(stored), bias ? std::optional(bias->to(dtype)) : std::nullopt, quant);
}

LinearLayer LinearLayer::from_weight(std::string name,
                                     BaseWeight weight,
                                     std::optional<at::Tensor> bias,
                                     const QuantSpec& quant) {
  LinearLayer l;
  l.name = std::move(name);
  if (const auto* dense = std::get_if<at::Tensor>(&weight)) {
    l.out_features = dense->size(0);
    l.in_features = dense->size(1);
  } else if (const auto* q4 = std::get_if<ops::Packed4bit>(&weight)) {
    TORCH_CHECK(q4->shape.size() == 2,
                l.name,
                ": a 4-bit linear weight must have a 2-D shape, got ",
                at::IntArrayRef(q4->shape));
    l.out_features = q4->shape[0];
    l.in_features = q4->shape[1];
  } else {
    l.out_features = std::get<ops::Int8Weight>(weight).out_features();
    l.in_features = std::get<ops::Int8Weight>(weight).in_features();
  }
  if (bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == l.out_features,
                l.name,
                ".bias must be [",
                l.out_features,
                "], got ",
                bias->sizes());
  }
  l.weight = std::move(weight);
  l.bias = std::move(bias);
  l.quant = quant;
  return l;
}

at::Tensor LinearLayer::forward(const at::Tensor& x, bool training) const {
  at::Tensor y;
  if (const auto* dense = std::get_if<at::Tensor>(&weight)) {
    y = ops::linear_dense(x, *dense, bias);
  } else if (const auto* q4 = std::get_if<ops::Packed4bit>(&weight)) {
    y = ops::linear_4bit(x, *q4, bias);
  } else {
    y = ops::linear_int8(x, std::get<ops::Int8Weight>(weight), bias, quant.int8_compute, quant.int8_threshold);
  }
  if (!lora || !lora::adapters_on()) return y;  // Note [Adapters off]
  if (lora->magnitude.defined()) return lora::dora_output(x, y, dense_weight(x.scalar_type()), bias, *lora, training);
  return y + lora::lora_delta(x, *lora, training);
}

at::Tensor LinearLayer::dense_weight(at::ScalarType dtype) const {
  if (const auto* dense = std::get_if<at::Tensor>(&weight)) return dense->to(dtype);
  if (const auto* q4 = std::get_if<ops::Packed4bit>(&weight)) return ops::dequantize_4bit(*q4, dtype);
  return std::get<ops::Int8Weight>(weight).dequantize(dtype);
}

int64_t LinearLayer::base_nbytes() const {
  if (const auto* dense = std::get_if<at::Tensor>(&weight)) return dense->nbytes();
  if (const auto* q4 = std::get_if<ops::Packed4bit>(&weight)) return q4->nbytes();
  return std::get<ops::Int8Weight>(weight).nbytes();
}

std::vector<at::Tensor> LinearLayer::base_tensors() const {
  if (const auto* dense = std::get_if<at::Tensor>(&weight)) return {*dense};
  if (const auto* q4 = std::get_if<ops::Packed4bit>(&weight)) {
    if (q4->nested) return {q4->packed, q4->nested->qabsmax, q4->nested->absmax2, q4->nested->code};
    return {q4->packed, q4->absmax};
  }
  const auto& w8 = std::get<ops::Int8Weight>(weight);
  return {w8.cb(), w8.scb()};
}

void LinearLayer::rebind_base_tensors(const std::vector<at::Tensor>& tensors) {
  const auto current = base_tensors();
  TORCH_CHECK(tensors.size() == current.size(),
              name,
              ": its base weight is stored in ",
              current.size(),
              " tensors, got ",
              tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TORCH_CHECK(tensors[i].scalar_type() == current[i].scalar_type() && tensors[i].sizes() == current[i].sizes(),
                name,
                ": base tensor ",
                i,
                " is ",
                current[i].scalar_type(),
                " ",
                current[i].sizes(),
                "; it cannot be rebound to ",
                tensors[i].scalar_type(),
                " ",
                tensors[i].sizes());
  }
  if (auto* dense = std::get_if<at::Tensor>(&weight)) {
    *dense = tensors[0];
  } else if (auto* q4 = std::get_if<ops::Packed4bit>(&weight)) {
    q4->packed = tensors[0];
    if (q4->nested) {
      q4->nested->qabsmax = tensors[1];
      q4->nested->absmax2 = tensors[2];
      q4->nested->code = tensors[3];
    } else {
      q4->absmax = tensors[1];
    }
  } else {
    weight = ops::Int8Weight::from_quantized(tensors[0], tensors[1], name);
  }
}

}  // namespace qtrain::engine::model
