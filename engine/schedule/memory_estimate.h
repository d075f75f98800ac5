// What a training step of a model costs in device memory, part by part, from the model's
// config.json and the run's settings alone (no weights are read): the input of the memory
// planner (offload/planner.h). Weight sizes are exact (what qtrain stores); activation sizes
// follow from what autograd keeps in qtrain's layer code. See Note [What a layer keeps for
// backward] in memory_estimate.cpp for the assumptions.
#pragma once

#include <cstdint>
#include <vector>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "engine/lora/lora_config.h"
#include "engine/model/grouped_expert_linear.h"
#include "engine/model/model_config.h"
#include "engine/model/quant_spec.h"
#include "engine/schedule/execution_plan.h"
#include "offload/planner.h"

namespace qtrain::engine::schedule {

// The settings of a run that decide its memory, besides the model.
struct MemoryShape {
  model::QuantSpec quant;
  bool quantize_moe_experts = true;  // MoE experts quantized as `quant` (else in `dtype`)
  lora::LoraConfig lora;
  at::ScalarType dtype = at::kBFloat16;  // compute dtype
  // The device the step runs on: it decides which attention kernel runs (and so what it keeps).
  c10::DeviceType device = c10::DeviceType::CUDA;
  int64_t micro_batch_size = 1;
  int64_t sequence_len = 2048;
  // Batches carry per-token segment ids (the trainer's always do, see Note [Packed batch layout]
  // in engine/data/pretokenized.h), so attention takes a [B, 1, T, T] mask.
  bool segment_mask = true;
  // Positions come per row ([B, T], the trainer's batches), so rope tables are [B, 1, T, head_dim].
  bool per_row_positions = true;
  CheckpointPolicy checkpoint = CheckpointPolicy::every_layer;
  int64_t checkpoint_every_k = 1;
  // Tiled MLP (engine/schedule/tiled_mlp.h): the dense MLPs run in chunks, tiled_mlp_shards of
  // them (0: of at most kDefaultTiledMlpTokens tokens).
  bool tiled_mlp = false;
  int64_t tiled_mlp_shards = 0;
  int64_t micro_batches_per_step = 1;  // gradient_accumulation_steps
  // AdamW's moments in bitsandbytes' 8-bit blockwise form (optimizer adamw_bnb_8bit) rather
  // than float32.
  bool optimizer_8bit = false;
  // The trainable tensors held twice: DPO's reference from the weights the run starts from
  // (Note [Reference adapter], engine/train/reference_weights.h).
  bool reference_copy = false;
  // The cap on the grouped expert kernel's workspace (Note [Grouped expert GEMM]; tests vary it).
  int64_t expert_workspace_bytes = model::kGroupedExpertWorkspaceBytes;
};

// The byte sizes of decoder layer `layer`'s base weights as qtrain stores them, in blob order
// (DecoderLayer::weight_linears): q, k, v (absent where the layer has none: Gemma 4's k_eq_v), o,
// then gate, up, down where the layer has a dense MLP (dense layers, every Gemma 4 layer), then
// on a sparse (MoE) layer each expert's gate_up [2I, H] and down [H, I]
// (quantized only with `quantize_moe_experts`), each as its stored tensors: a dense weight
// [out, in] in `dtype`; 4-bit: packed codes uint8 [(n + 1) / 2], then absmax float32 [blocks], or
// with double quantization qabsmax uint8 [blocks], absmax2 float32 [ceil(blocks / 256)], code
// float32 [256]; int8: CB int8 [out, in], SCB float32 [out]. Biases and MoE routers are not part
// of it (they stay resident).
std::vector<int64_t> layer_weight_nbytes(const model::ModelConfig& config,
                                         int64_t layer,
                                         const model::QuantSpec& quant,
                                         at::ScalarType dtype,
                                         bool quantize_moe_experts = true);

// Every part of a step's device memory, for the planner.
offload::PlanInputs estimate_memory(const model::ModelConfig& config, const MemoryShape& shape);

}  // namespace qtrain::engine::schedule
