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
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

#include "engine/lora/lora_config.h"

namespace qtrain::engine::lora {

// One adapter: y = W x + scaling * B A dropout(x). A maps in -> r, B maps r -> out; both are
// stored as nn.Linear weights are, [out_features, in_features] of their own map.
struct LoraAdapter {
  at::Tensor a;  // [r, in] fp32, requires_grad
  at::Tensor b;  // [out, r] fp32, requires_grad; zero at init, so a new adapter is a no-op
  double scaling = 1.0;
  double dropout = 0.0;

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

// base_w: [out, in] -> W + scaling * (B @ A) in base_w's dtype, the delta computed in the
// adapter's dtype and added before the single rounding (PEFT's Linear.merge). Not differentiable:
// merging is for export.
at::Tensor lora_merged_weight(const at::Tensor& base_w, const LoraAdapter& adapter);

}  // namespace qtrain::engine::lora
