// The LoRA maths on one linear layer: initialisation, the low-rank update added to the frozen
// layer's output, and the merged weight. Numerics follow PEFT 0.21 (peft/tuners/lora/layer.py and
// bnb.py) so that an adapter trained here means the same thing in PEFT; see Note [LoRA numerics].
//
// Note [LoRA numerics]
// PEFT keeps the adapter weights in fp32 (autocast_adapter_dtype=True upcasts bf16/fp16 ones) and,
// outside torch.autocast, casts the layer input to the adapter's dtype before the LoRA path
// (`x = self._cast_input_dtype(x, lora_A.weight.dtype)`), so the two small matmuls run in fp32
// even when the base layer computes in bf16:
//     delta = lora_B(lora_A(dropout(x.to(fp32)))) * scaling            (fp32)
// Dropout acts on the already-cast input. How the fp32 delta is added differs between PEFT's
// layer types:
//   - bitsandbytes bases (lora/bnb.py Linear4bit, Linear8bitLt; QLoRA):
//         result = result + delta.to(result.dtype)        rounds delta, then adds in bf16
//   - plain nn.Linear bases (lora/layer.py Linear):
//         result = (result + delta).to(result.dtype)      adds in fp32, rounds once
// qtrain's bases are quantized, so lora_delta returns the delta already cast to x's dtype and the
// caller adds it in the compute dtype: the bnb behaviour, which the interop test reproduces bit
// for bit against PEFT's bnb Linear4bit. (For bf16 inputs the two conventions differ by one bf16
// rounding in a sizeable fraction of the elements.) Under torch.autocast (HF Trainer with
// bf16=True) PEFT skips the cast and the LoRA matmuls themselves run in bf16; qtrain does not
// emulate autocast.
//
// Note [DoRA]
// PEFT's use_dora (peft/tuners/lora/dora.py, DoraLinearLayer; variants.py, DoraLinearVariant)
// adds a trained magnitude m [out] to A and B. With W the base weight dequantized to the compute
// dtype and then to float32, and h = x.to(fp32) (after dropout when training with dropout):
//     norm   = || W + scaling * (B A) ||  per output row, B A detached, the norm itself detached
//     s      = m / norm                                              [1, out]
//     dora   = (s - 1) * base + s * B(A(h)) * scaling
//     y      = (W x + bias + dora).to(x's dtype)
// where `base` is the base layer's own output less its bias (W x in the compute dtype) when no
// dropout acts, and F.linear(h, W) (float32) on the dropped-out input otherwise. Unlike plain
// LoRA on a bitsandbytes base, PEFT adds the float32 DoRA term to the base output before the one
// rounding. A new adapter starts with m = || W || per row (B is zero), so it is a no-op. The
// merged weight is (m / || W + scaling B A ||) * (W + scaling B A), row by row. qtrain computes B A
// as one product where PEFT's forward multiplies an identity matrix through the two layers (the
// same sums in a different order, and an [in, in] temporary qtrain does not make). Each forward
// makes float32 copies of W: DoRA costs a dense weight per adapted layer transiently, in PEFT as
// here.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "engine/lora/lora_config.h"

namespace qtrain::engine::lora {

// One adapter: y = W x + scaling * B A dropout(x). A maps in -> r, B maps r -> out; both are
// stored as nn.Linear weights are, [out_features, in_features] of their own map.
struct LoraAdapter {
  at::Tensor a;  // [r, in] fp32, requires_grad
  at::Tensor b;  // [out, r] fp32, requires_grad; zero at init, so a new adapter is a no-op
  double scaling = 1.0;
  double dropout = 0.0;
  // DoRA's magnitude (Note [DoRA]): [out] fp32, requires_grad; undefined for plain LoRA.
  at::Tensor magnitude;

  int64_t rank() const { return a.size(0); }
  int64_t in_features() const { return a.size(1); }
  int64_t out_features() const { return b.size(0); }
};

// PEFT's init_lora_weights=True: A ~ kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in))
// with torch's exact bound arithmetic, and B = 0. A is drawn on the CPU from `gen` (a CPU
// generator, which this advances) so the values do not depend on `device`; both are then moved
// to `device` and made trainable leaves. Scaling and dropout come from `config`.
LoraAdapter lora_init(int64_t in_features,
                      int64_t out_features,
                      const LoraConfig& config,
                      at::Generator gen,
                      at::Device device = at::kCPU);
// Same, from a fresh CPU generator seeded with `seed`.
LoraAdapter lora_init(
    int64_t in_features, int64_t out_features, const LoraConfig& config, uint64_t seed, at::Device device = at::kCPU);

// x: [..., in] in the compute dtype -> [..., out] in x's dtype:
//     (linear(linear(dropout(x.to(A.dtype)), A), B) * scaling).to(x.dtype)
// differentiable in x, A and B. Dropout applies only when `training` and dropout > 0; it draws
// from the default generator of x's device (as nn.Dropout does), so restoring that generator's
// state replays the same masks. See Note [LoRA numerics] for the dtypes.
at::Tensor lora_delta(const at::Tensor& x, const LoraAdapter& adapter, bool training);

// DoRA's starting magnitude: the L2 norm of each row of W + scaling * (B @ A) computed in float32
// (PEFT's DoraLinearLayer.update_layer), as a trainable fp32 leaf on the adapter's device.
// `base_w`: [out, in], the base weight dequantized to the compute dtype.
at::Tensor dora_magnitude(const at::Tensor& base_w, const LoraAdapter& adapter);

// A DoRA layer's output (Note [DoRA]): `base_out` = W x + bias as the base layer computed it,
// `base_w` the base weight dequantized to x's dtype, `bias` the base layer's bias (if any), in x's
// dtype. Differentiable in x, A, B and the magnitude. Dropout as lora_delta's.
at::Tensor dora_output(const at::Tensor& x,
                       const at::Tensor& base_out,
                       const at::Tensor& base_w,
                       const std::optional<at::Tensor>& bias,
                       const LoraAdapter& adapter,
                       bool training);

// base_w: [out, in] -> W + scaling * (B @ A) in base_w's dtype (with DoRA, that scaled row by row
// to the magnitude, Note [DoRA]), the delta computed in the
// adapter's dtype and added before the single rounding (PEFT's Linear.merge). Not differentiable:
// merging is for export.
at::Tensor lora_merged_weight(const at::Tensor& base_w, const LoraAdapter& adapter);

}  // namespace qtrain::engine::lora
