// The memory estimate against real models: the offload blob of every layer, the always-resident
// weights and the LoRA state are exactly what a loaded model holds (float, NF4 and FP4 with and
// without double quantization, INT8; shapes with odd sizes and partial blocks), and the
// activations a training forward keeps on the CPU match the heap it actually leaves allocated.
#include "engine/schedule/memory_estimate.h"

#include <gtest/gtest.h>

#include <numeric>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "engine/io/hf_folder.h"
#include "engine/io/remove_tree.h"
#include "engine/model/causal_lm.h"
#include "engine/model/grouped_expert_linear.h"
#include "engine/model/init_model.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/train/adamw_8bit.h"
#include "offload/blob_layout.h"
#include "tests/temp_dir.h"
#include "tests/tensor_peak.h"

namespace qtrain::engine::schedule {
namespace {

using model::QuantSpec;

// The byte sizes of a loaded layer's base weight tensors, in blob order (see memory_estimate.h).
std::vector<int64_t> stored_nbytes(const model::DecoderLayer& layer) {
  std::vector<int64_t> out;
  for (const auto* l : layer.weight_linears()) {
    if (const auto* dense = std::get_if<at::Tensor>(&l->weight)) {
      out.push_back(dense->nbytes());
    } else if (const auto* q4 = std::get_if<ops::Packed4bit>(&l->weight)) {
      out.push_back(q4->packed.nbytes());
      if (q4->nested) {
        for (const auto& t : {q4->nested->qabsmax, q4->nested->absmax2, q4->nested->code}) out.push_back(t.nbytes());
      } else {
        out.push_back(q4->absmax.nbytes());
      }
    } else {
      const auto& w = std::get<ops::Int8Weight>(l->weight);
      out.push_back(w.cb().nbytes());
      out.push_back(w.scb().nbytes());
    }
  }
  return out;
}

// Everything resident besides the layers' base weights, as loaded.
int64_t resident_nbytes(const model::CausalLM& lm) {
  int64_t bytes = lm.embed_tokens().nbytes() + lm.norm_weight().nbytes();
  if (!lm.lm_head().is_same(lm.embed_tokens())) bytes += lm.lm_head().nbytes();
  for (const auto& layer : lm.layers()) {
    bytes += layer.input_norm.nbytes() + layer.post_attn_norm.nbytes();
    if (layer.pre_ff_norm) bytes += layer.pre_ff_norm->nbytes() + layer.post_ff_norm->nbytes();
    if (layer.q_norm) bytes += layer.q_norm->nbytes() + layer.k_norm->nbytes();
    if (layer.layer_scalar.defined()) bytes += layer.layer_scalar.nbytes();
    if (layer.moe && layer.moe->gemma4_router) {
      const auto& r = *layer.moe->gemma4_router;
      bytes += r.proj.nbytes() + r.scale.nbytes() + r.per_expert_scale.nbytes();
      bytes += layer.post_ff_norm_1->nbytes() + layer.pre_ff_norm_2->nbytes() + layer.post_ff_norm_2->nbytes();
    } else if (layer.moe) {
      bytes += layer.moe->router.nbytes();
    }
    for (const auto* l : layer.linears()) {
      if (l->bias) bytes += l->bias->nbytes();
    }
  }
  return bytes;
}

// A Qwen2 (q/k/v biases) with odd sizes: hidden 63, intermediate 301, so that packed codes end
// in a half byte and blocks are partial; 301 * 63 weights make 297 blocks of 64, so the nested
// absmax has two blocks of 256.
model::ModelConfig odd_qwen2() {
  auto c = model::preset_config(model::Architecture::qwen2, "tiny");
  c.hidden_size = 63;
  c.intermediate_size = 301;
  return c;
}

// Qwen3-MoE with layer 1 dense (mlp_only_layers) between two sparse layers.
model::ModelConfig mixed_qwen3_moe() {
  auto c = model::preset_config(model::Architecture::qwen3_moe, "tiny");
  c.num_layers = 3;
  c.sliding_window.assign(3, std::nullopt);
  c.moe->sparse = {true, false, true};
  return c;
}

// Gemma 4 with enable_moe_block: 5 experts of width 24, top-2, beside the dense MLP on both layers.
model::ModelConfig gemma4_moe() {
  auto c = model::preset_config(model::Architecture::gemma4, "tiny");
  c.moe = model::gemma4_moe_config(c.num_layers, 5, 2, 24);
  return c;
}

struct Variant {
  QuantSpec quant;
  at::ScalarType dtype;
  std::string name;
};

std::vector<Variant> variants() {
  const auto q = [](QuantSpec::Kind kind, int64_t blocksize, bool double_quant) {
    QuantSpec s;
    s.kind = kind;
    s.blocksize = blocksize;
    s.double_quant = double_quant;
    return s;
  };
  return {{q(QuantSpec::Kind::none, 64, false), at::kFloat, "float32"},
          {q(QuantSpec::Kind::none, 64, false), at::kBFloat16, "bfloat16"},
          {q(QuantSpec::Kind::nf4, 64, true), at::kBFloat16, "nf4 double quant"},
          {q(QuantSpec::Kind::nf4, 64, false), at::kFloat, "nf4"},
          {q(QuantSpec::Kind::fp4, 128, true), at::kFloat, "fp4 blocksize 128 double quant"},
          {q(QuantSpec::Kind::fp4, 32, false), at::kBFloat16, "fp4 blocksize 32"},
          {q(QuantSpec::Kind::int8, 64, false), at::kBFloat16, "int8"}};
}

TEST(MemoryEstimate, WeightsAndLoraStateAreWhatALoadedModelHolds) {
  const auto dir = test::fresh_test_dir(true);
  for (const auto& [name, config] :
       {std::pair{"llama tiny", model::preset_config(model::Architecture::llama, "tiny")},
        std::pair{"qwen3 tiny", model::preset_config(model::Architecture::qwen3, "tiny")},
        std::pair{"gemma2 tiny", model::preset_config(model::Architecture::gemma2, "tiny")},
        std::pair{"gemma3 tiny", model::preset_config(model::Architecture::gemma3, "tiny")},
        std::pair{"gemma4 tiny", model::preset_config(model::Architecture::gemma4, "tiny")},
        std::pair{"odd qwen2", odd_qwen2()},
        std::pair{"qwen3_moe tiny", mixed_qwen3_moe()},
        std::pair{"gemma4 tiny moe", gemma4_moe()},
        std::pair{"mixtral tiny, experts unquantized", model::preset_config(model::Architecture::mixtral, "tiny")}}) {
    const bool quantize_experts = std::string(name).find("unquantized") == std::string::npos;
    const auto folder_dir = dir / name;
    model::write_random_model(folder_dir, config, 3);
    const auto folder = io::HfFolder::open(folder_dir);
    for (const Variant& v : variants()) {
      SCOPED_TRACE(std::string(name) + ", " + v.name);
      model::LoadOptions options;
      options.quant = v.quant;
      options.dtype = v.dtype;
      options.quantize_moe_experts = quantize_experts;
      auto lm = model::CausalLM::load(folder, options);
      lora::LoraConfig lora;
      lora.r = 5;
      // The routers (Gemma 4's router.proj as "proj", the others' gate.weight) and the
      // embeddings and head trained in full count too.
      lora.target_modules = {"q_proj", "v_proj", "layers.1.mlp.down_proj", "proj"};
      lora.target_parameters = {
          "experts.gate_up_proj", "layers.2.mlp.experts.down_proj", "layers.1.experts.down_proj", "gate.weight"};
      lora.rank_pattern = {{"layers.0.self_attn.q_proj", 3}, {".*\\.gate_up_proj", 7}, {".*gate.weight", 2}};
      lora.modules_to_save = {"embed_tokens", "lm_head"};
      model::attach_new_lora(lm, lora, 1);
      MemoryShape shape;
      shape.quant = v.quant;
      shape.lora = lora;
      shape.dtype = v.dtype;
      shape.quantize_moe_experts = quantize_experts;
      const auto in = estimate_memory(config, shape);
      ASSERT_EQ(in.layers.size(), lm.layers().size());
      for (const auto& layer : lm.layers()) {
        const auto expected = layer_weight_nbytes(config, layer.index, v.quant, v.dtype, quantize_experts);
        const auto real = stored_nbytes(layer);
        EXPECT_EQ(expected, real) << "layer " << layer.index;
        EXPECT_EQ(in.layers[layer.index].blob_bytes, offload::blob_bytes(real)) << "layer " << layer.index;
      }
      // The rope frequencies (float32 [head_dim / 2], Gemma 3 and 4: a second set for their
      // sliding layers, Gemma 4's of another head_dim) are not reachable from outside CausalLM.
      const int64_t rope_dims = config.rope_head_dim(false) + (config.sliding_rope ? config.rope_head_dim(true) : 0);
      EXPECT_EQ(in.fixed_bytes, resident_nbytes(lm) + rope_dims / 2 * 4);
      int64_t lora_bytes = 0;
      for (const auto& p : lm.trainable_parameters()) lora_bytes += 4 * p.nbytes();  // + grad, m, v
      EXPECT_EQ(in.lora_bytes, lora_bytes);
    }
  }
  qtrain::engine::io::remove_tree(dir);
}

// With the 8-bit AdamW the LoRA state is the float32 weights and gradients plus exactly what
// AdamW8bit allocates: rank 64 on the tiny llama gives tensors above (q_proj's [64, 64]) and below
// (v_proj's lora_B [32, 64]) its 4096-element threshold.
TEST(MemoryEstimate, LoraStateWithThe8bitOptimizerIsWhatAdamW8bitHolds) {
  const auto dir = test::fresh_test_dir(true);
  const auto config = model::preset_config(model::Architecture::llama, "tiny");
  model::write_random_model(dir / "llama", config, 3);
  auto lm = model::CausalLM::load(io::HfFolder::open(dir / "llama"), model::LoadOptions{});
  lora::LoraConfig lora;
  lora.r = 64;
  lora.target_modules = {"q_proj", "v_proj", "down_proj"};
  model::attach_new_lora(lm, lora, 1);
  const auto params = lm.trainable_parameters();
  MemoryShape shape;
  shape.lora = lora;
  shape.dtype = at::kFloat;
  shape.optimizer_8bit = true;
  const auto in = estimate_memory(config, shape);
  const train::AdamW8bit optimizer(params, {});
  int64_t weights_and_grads = 0;
  for (const auto& p : params) weights_and_grads += 2 * p.nbytes();
  // state_nbytes counts the int64 step counter too, which is no per-tensor state.
  EXPECT_EQ(in.lora_bytes, weights_and_grads + optimizer.state_nbytes() - 8);
  EXPECT_EQ(in.lora_what, "float32, AdamW moments in 8 bits");
  bool some_8bit = false, some_32bit = false;
  for (size_t i = 0; i < params.size(); ++i) (optimizer.is_8bit(i) ? some_8bit : some_32bit) = true;
  EXPECT_TRUE(some_8bit && some_32bit);
  shape.optimizer_8bit = false;
  EXPECT_EQ(estimate_memory(config, shape).lora_bytes, 2 * weights_and_grads);
  qtrain::engine::io::remove_tree(dir);
}

// The dense part of Gemma-4-26B-A4B per layer against the parameter and byte counts computed
// from the released config and transformers' module shapes: attention 34 603 008 (sliding) and
// 49 020 928 (full, no v_proj) parameters, dense MLP 17 842 176; in NF4 with double quantization
// 27.06 MB for a sliding layer's linears (0.51587 B per parameter there; qtrain stores a 1 KiB
// code per tensor where that count has 1092 B, 0.0005 MB a layer).
TEST(MemoryEstimate, Gemma4DenseLayersMatchTheReferenceCounts) {
  auto c = model::preset_config(model::Architecture::gemma4, "gemma4-26b-a4b");
  c.moe.reset();  // the experts: Gemma4MoeMatchesTheReferenceCounts
  ASSERT_EQ(c.num_layers, 30);
  auto params = [&](int64_t layer) {
    int64_t bytes = 0;
    for (auto b : layer_weight_nbytes(c, layer, QuantSpec{}, at::kFloat)) bytes += b;
    return bytes / 4;
  };
  EXPECT_EQ(params(0), 34603008 + 17842176);
  EXPECT_EQ(params(5), 49020928 + 17842176);
  EXPECT_EQ(params(29), params(5));  // the last layer is full
  QuantSpec nf4;
  nf4.kind = QuantSpec::Kind::nf4;
  nf4.double_quant = true;
  int64_t sliding = 0;
  for (auto b : layer_weight_nbytes(c, 0, nf4, at::kBFloat16)) sliding += b;
  EXPECT_NEAR(sliding / 1e6, 27.06, 0.005);
}

// Gemma-4-26B-A4B with its experts against the counts computed from the released config and
// transformers' module shapes: per layer 761 266 176 expert parameters (128 x (1408 x 2816 +
// 2816 x 704)) beside attention and the dense MLP; in all 25 233 141 790 parameters (25.2 B),
// 3 822 530 590 (3.8 B) active per token (the embeddings, attention, dense MLP, router, norms and
// 8 of the 128 experts); the experts of a layer in NF4 with double quantization 392.72 MB at
// 0.51587 B per parameter, plus the 1 KiB code qtrain stores per tensor (256 tensors).
TEST(MemoryEstimate, Gemma4MoeMatchesTheReferenceCounts) {
  const auto c = model::preset_config(model::Architecture::gemma4, "gemma4-26b-a4b");
  ASSERT_TRUE(c.moe);
  auto dense = c;
  dense.moe.reset();
  auto sum = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); };
  auto params = [&](const model::ModelConfig& config, int64_t layer) {
    return sum(layer_weight_nbytes(config, layer, QuantSpec{}, at::kFloat)) / 4;
  };
  EXPECT_EQ(params(c, 0), 34603008 + 17842176 + 761266176);
  EXPECT_EQ(params(c, 5), 49020928 + 17842176 + 761266176);
  MemoryShape shape;
  shape.dtype = at::kFloat;
  const auto in = estimate_memory(c, shape);
  const int64_t rope_dims = c.rope_head_dim(false) + c.rope_head_dim(true);
  int64_t total = (in.fixed_bytes - rope_dims / 2 * 4) / 4, active = total;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    total += params(c, i);
    const int64_t experts = params(c, i) - params(dense, i);
    active += params(dense, i) + experts * c.moe->top_k / c.moe->num_experts;
  }
  EXPECT_EQ(total, int64_t{25233141790});
  EXPECT_EQ(active, int64_t{3822530590});
  QuantSpec nf4;
  nf4.kind = QuantSpec::Kind::nf4;
  nf4.double_quant = true;
  const int64_t experts_nf4 =
      sum(layer_weight_nbytes(c, 0, nf4, at::kBFloat16)) - sum(layer_weight_nbytes(dense, 0, nf4, at::kBFloat16));
  EXPECT_NEAR(experts_nf4 / 1e6, 392.72 + 256 * 1024 / 1e6, 0.01);
  // quantize_moe_experts: false keeps them in bfloat16.
  EXPECT_EQ(sum(layer_weight_nbytes(c, 0, nf4, at::kBFloat16, false)) -
                sum(layer_weight_nbytes(dense, 0, nf4, at::kBFloat16)),
            761266176 * 2);
}

// On CUDA the 26B-A4B's experts run the grouped kernel, which dequantizes a chunk of experts at a
// time into one workspace (Note [Grouped expert GEMM]). In bfloat16, gate_up [1408, 2816] is
// 7.9 MB and down [2816, 704] 4.0 MB: 33 and 67 experts fit the 256 MiB cap, 8 and 16 fit 64 MiB.
// The layer's backward transient holds the larger chunk (plus one expert's dequantization
// scratch); the CPU's per-expert kernel and LLM.int8 experts hold one weight, whatever the cap.
// Expert LoRA has no dropout (PEFT refuses it on parameters, and qtrain's expert adapters have
// none whatever lora_dropout says), so lora_dropout changes what a MoE layer keeps only through
// the adapters on linear layers.
TEST(MemoryEstimate, LoraDropoutAddsNothingToTheExpertAdapters) {
  const auto c = model::preset_config(model::Architecture::gemma4, "gemma4-26b-a4b");
  MemoryShape shape;
  shape.lora.target_parameters = {"experts.gate_up_proj", "experts.down_proj"};
  const auto saved = [&](double dropout) {
    shape.lora.dropout = dropout;
    return estimate_memory(c, shape).layers[1].saved_full;
  };
  EXPECT_EQ(saved(0.1), saved(0.0));
  // q_proj's dropout keeps its mask from the second layer on (the first layer's input needs no
  // gradient, so in bfloat16 its dropped copy replaces the cast copy and nothing is added).
  shape.lora.target_modules = {"q_proj"};
  EXPECT_GT(saved(0.1), saved(0.0));
}

TEST(MemoryEstimate, TheGroupedExpertKernelsWorkspaceIsAChunkOfExperts) {
  const auto c = model::preset_config(model::Architecture::gemma4, "gemma4-26b-a4b");
  MemoryShape shape;
  shape.quant.kind = QuantSpec::Kind::nf4;
  shape.quant.double_quant = true;
  ASSERT_EQ(shape.expert_workspace_bytes, model::kGroupedExpertWorkspaceBytes);
  const int64_t gate_up = 2 * c.moe->expert_intermediate_size * c.hidden_size * 2;  // bfloat16 bytes
  const int64_t down = gate_up / 2;
  ASSERT_EQ(gate_up, 7929856);
  ASSERT_EQ(model::kGroupedExpertWorkspaceBytes / gate_up, 33);
  ASSERT_EQ(model::kGroupedExpertWorkspaceBytes / down, 67);
  const auto absmax = [](int64_t bytes) { return bytes / 2 / 64 * 4; };
  // The transient of layer 0 with the cap at 256 MiB minus with it at 64 MiB.
  const auto cap_delta = [&] {
    shape.expert_workspace_bytes = int64_t{256} << 20;
    const int64_t wide = estimate_memory(c, shape).layers[0].backward_transient;
    shape.expert_workspace_bytes = int64_t{64} << 20;
    return wide - estimate_memory(c, shape).layers[0].backward_transient;
  };
  EXPECT_EQ(cap_delta(),
            std::max(33 * gate_up + absmax(gate_up), 67 * down + absmax(down)) -
                std::max(8 * gate_up + absmax(gate_up), 16 * down + absmax(down)));
  shape.device = c10::DeviceType::CPU;
  EXPECT_EQ(cap_delta(), 0);
  // INT8 experts with the default int8_compute (dequantize) are grouped, with two float32
  // temporaries of one expert's dequantization beside the chunk (8 bytes an element: 4x the
  // bfloat16 bytes); LLM.int8 products keep the per-expert kernel.
  shape.device = c10::DeviceType::CUDA;
  shape.quant.kind = QuantSpec::Kind::int8;
  shape.quant.double_quant = false;
  EXPECT_EQ(cap_delta(),
            std::max(33 * gate_up + 4 * gate_up, 67 * down + 4 * down) -
                std::max(8 * gate_up + 4 * gate_up, 16 * down + 4 * down));
  shape.quant.int8_compute = ops::Int8Compute::llm_int8;
  EXPECT_EQ(cap_delta(), 0);
}

// The plan names a layer's modules as the checkpoint does (model.language_model. in a multimodal
// Gemma folder, as training attaches them), so a regular expression over those names counts the
// same adapters.
TEST(MemoryEstimate, LoraTargetsAreTheCheckpointsModuleNames) {
  auto c = model::preset_config(model::Architecture::gemma3, "tiny");
  MemoryShape shape;
  shape.lora.target_modules_regex = "model\\.language_model\\.layers\\.\\d+\\.self_attn\\.q_proj";
  c.weight_prefix = "model.language_model.";
  const int64_t q_proj = shape.lora.r * (c.hidden_size + c.num_heads * c.head_dim);  // A and B
  const int64_t lora = estimate_memory(c, shape).lora_bytes;
  EXPECT_GT(lora, 0);
  EXPECT_EQ(lora % (q_proj * c.num_layers), 0);
  c.weight_prefix = "model.";
  EXPECT_EQ(estimate_memory(c, shape).lora_bytes, 0);
}

// On CUDA, k and v are expanded to every query head where flash cannot run (Note [Which CUDA
// attention kernel], ops/nn/attention.cpp): unpacked, Gemma 4's global layers (head_dim 512, 16
// query heads over 2) keep the expanded copies, its sliding layers (head_dim 256, no mask below
// the window) do not; packed, both do. The CPU never expands.
TEST(MemoryEstimate, CudaCountsExpandedKeysAndValuesWhereFlashCannotRun) {
  const auto c = model::preset_config(model::Architecture::gemma4, "gemma4-26b-a4b");
  int64_t global = -1, sliding = -1;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.attention(l).head_dim == 512 && global < 0) global = l;
    if (c.attention(l).head_dim == 256 && sliding < 0) sliding = l;
  }
  ASSERT_GE(global, 0);
  ASSERT_GE(sliding, 0);
  ASSERT_NE(c.attention(global).num_kv_heads, c.num_heads);
  ASSERT_NE(c.attention(sliding).num_kv_heads, c.num_heads);
  MemoryShape shape;
  shape.sequence_len = 1024;  // the sliding window: no mask on the sliding layers unpacked
  shape.segment_mask = false;
  const auto cuda_minus_cpu = [&](int64_t layer) {
    shape.device = c10::DeviceType::CUDA;
    const int64_t cuda = estimate_memory(c, shape).layers[layer].saved_full;
    shape.device = c10::DeviceType::CPU;
    return cuda - estimate_memory(c, shape).layers[layer].saved_full;
  };
  const auto expansion = [&](int64_t layer) {
    const auto a = c.attention(layer);
    return 2 * shape.sequence_len * (c.num_heads - a.num_kv_heads) * a.head_dim * 2;  // k and v, bfloat16
  };
  EXPECT_EQ(cuda_minus_cpu(global), expansion(global));
  EXPECT_EQ(cuda_minus_cpu(sliding), 0);
  shape.segment_mask = true;
  EXPECT_EQ(cuda_minus_cpu(global), expansion(global));
  EXPECT_EQ(cuda_minus_cpu(sliding), expansion(sliding));
}

// init-model --layers N (the GPU benchmark's 26B-A4B with fewer layers): the first layers keep
// their shapes and bytes, the last one is a full layer as transformers requires, and the config
// reads back as written.
TEST(InitModelLayers, TheFirstLayersOfAPresetKeepTheirShapesAndAFullLastLayer) {
  const auto full = model::preset_config(model::Architecture::gemma4, "gemma4-26b-a4b");
  const auto six = model::first_layers(full, 6);
  QuantSpec nf4;
  nf4.kind = QuantSpec::Kind::nf4;
  nf4.double_quant = true;
  ASSERT_EQ(six.num_layers, 6);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(layer_weight_nbytes(six, i, nf4, at::kBFloat16), layer_weight_nbytes(full, i, nf4, at::kBFloat16)) << i;
  }
  EXPECT_FALSE(six.sliding_window[5].has_value());
  EXPECT_EQ(layer_weight_nbytes(six, 5, nf4, at::kBFloat16), layer_weight_nbytes(full, 29, nf4, at::kBFloat16));
  const auto back = model::ModelConfig::from_json(six.to_json(), "six/config.json");
  EXPECT_EQ(back.num_layers, 6);
  EXPECT_EQ(back.sliding_window, six.sliding_window);
  ASSERT_TRUE(back.moe.has_value());
  EXPECT_EQ(back.moe->sparse, std::vector<bool>(6, true));
  // Layer 1 of the tiny Gemma 4 is its full layer: one layer keeps that one.
  EXPECT_FALSE(
      model::first_layers(model::preset_config(model::Architecture::gemma4, "tiny"), 1).sliding_window[0].has_value());
  try {
    model::first_layers(full, 31);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--layers 31: the preset has 30 layers; give 1 to 30"), std::string::npos)
        << e.what();
  }
}

// What the forward leaves allocated for backward on the CPU, counted exactly in tensor bytes
// (TensorPeak: the CPU allocator's own reports), against the estimate of the same: every
// layer's saved activations and those outside the layers, at two sequence lengths. They must be
// equal but for small tensors the estimate leaves out: the loss (4 bytes), each checkpoint's CPU
// RNG state (5,056 bytes), the MoE layers' counts and indices per expert (about 2 KiB): at most
// 8 KiB a layer. (2026-11-27: dense layers exact; checkpointing adds the RNG states; MoE layers
// 2 to 2.3 KiB.) A dequantized weight kept by mistake (180 KiB here) or a term off by one
// [N, 1] float32 per layer (1.5 KiB, times 3 layers) shows. A first forward warms up.
// Gemma 2 (four norms, GeGLU, soft-capped unfused attention on the full layers, a window of 64
// on the others), Gemma 3 (q/k norms, two rope tables) and Gemma 4 (v norm, a wider full layer
// without v_proj, layer_scalar) in float32 and bfloat16 without dropout.
model::ModelConfig activations_config(model::Architecture arch) {
  auto config = model::preset_config(arch, "tiny");
  config.hidden_size = 128;
  config.intermediate_size = 352;
  config.num_layers = 3;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 32;
  config.vocab_size = 512;
  config.sliding_window.assign(3, std::nullopt);
  if (config.gemma) config.sliding_window[0] = config.sliding_window[2] = 64;
  if (arch == model::Architecture::gemma4) {
    // Its last layer is full (transformers forces it): wider heads, one kv head, no v_proj.
    config.sliding_window = {64, 64, std::nullopt};
    config.layer_attention = {{32, 2, false}, {32, 2, false}, {64, 1, true}};
  }
  return config;
}

// The test model in `dtype`: NF4 with double quantization, LoRA r=8 on every linear layer (q_proj
// and down_proj at other ranks, by rank_pattern), and on the experts too where there is no dropout
// (PEFT allows none on parameters; gate_up_proj at twice the rank).
struct LoraModel {
  model::CausalLM lm;
  lora::LoraConfig lora;
  model::LoadOptions options;
};
LoraModel nf4_lora_model(const io::HfFolder& folder,
                         const model::ModelConfig& config,
                         at::ScalarType dtype,
                         double dropout) {
  model::LoadOptions options;
  options.quant.kind = QuantSpec::Kind::nf4;
  options.quant.double_quant = true;
  options.dtype = dtype;
  LoraModel m{model::CausalLM::load(folder, options), {}, options};
  m.lora.r = 8;
  m.lora.dropout = dropout;
  m.lora.target_all_linear = true;
  m.lora.rank_pattern = {{"q_proj", 4}, {"mlp.down_proj", 12}, {".*\\.gate_up_proj", 16}};
  if (config.moe && dropout == 0) m.lora.target_parameters = {"experts.gate_up_proj", "experts.down_proj"};
  model::attach_new_lora(m.lm, m.lora, 2);
  return m;
}

// What estimate_memory is asked for a step of that model on the CPU.
MemoryShape cpu_shape(const LoraModel& m, int64_t batch, int64_t seq, CheckpointPolicy policy) {
  MemoryShape shape;
  shape.quant = m.options.quant;
  shape.lora = m.lora;
  shape.dtype = m.options.dtype;
  shape.device = c10::DeviceType::CPU;
  shape.micro_batch_size = batch;
  shape.sequence_len = seq;
  shape.segment_mask = false;  // train_forward(plan, ids, labels) passes no segment ids
  shape.per_row_positions = false;
  shape.checkpoint = policy;
  return shape;
}

void check_activations(const model::ModelConfig& config) {
  const auto dir = test::fresh_test_dir(true);
  model::write_random_model(dir, config, 4);
  const auto folder = io::HfFolder::open(dir);
  const int64_t batch = 2;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto ids = at::randint(config.vocab_size, {batch, 384}, gen, at::kLong);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const double dropout : {0.0, 0.1}) {
      if (config.gemma && dropout > 0) continue;
      auto m = nf4_lora_model(folder, config, dtype, dropout);
      for (const auto policy : {CheckpointPolicy::none, CheckpointPolicy::every_layer}) {
        // Tiled MLP changes what a layer keeps only where the layer is not checkpointed.
        for (const int64_t seq : {192, 384})
          for (const bool tiled : {false, true}) {
            if (tiled && policy != CheckpointPolicy::none) continue;
            SCOPED_TRACE(std::string(c10::toString(dtype)) + ", dropout " + std::to_string(dropout) + ", " +
                         (policy == CheckpointPolicy::none ? "no checkpointing" : "every layer checkpointed") + ", " +
                         std::to_string(seq) + " tokens a row" + (tiled ? ", MLPs tiled in 3 chunks" : ""));
            auto shape = cpu_shape(m, batch, seq, policy);
            shape.tiled_mlp = tiled;
            shape.tiled_mlp_shards = 3;
            const auto in = estimate_memory(config, shape);
            int64_t estimate = in.saved_outside_layers;
            for (const auto& l : in.layers) estimate += l.checkpointed ? l.saved_checkpointed : l.saved_full;
            estimate -= 4 * batch * seq * 8;  // the batch's four int64 tensors exist before the forward here

            const auto x = ids.narrow(1, 0, seq).contiguous();
            int64_t measured = 0;
            for (int run = 0; run < 2; ++run) {
              LayerScheduler scheduler(m.lm);
              if (tiled) scheduler.tile_mlp(std::make_shared<TiledMlp>(3));
              const auto plan = scheduler.prepare_training(policy);
              test::TensorPeakGuard tensors;
              const auto r = scheduler.train_forward(plan, x, x);
              measured = tensors->current();
            }
            EXPECT_GE(measured, estimate);
            EXPECT_LE(measured, estimate + config.num_layers * 8192)
                << "measured " << measured << " B, estimated " << estimate << " B";
          }
      }
    }
  }
  qtrain::engine::io::remove_tree(dir);
}

class MemoryEstimateActivations : public testing::TestWithParam<model::Architecture> {};

TEST_P(MemoryEstimateActivations, MatchWhatAForwardKeepsOnTheCpu) {
  check_activations(activations_config(GetParam()));
}

// Gemma 4's layers with 6 experts of width 40, top-2, beside the dense MLP: the experts' rows,
// the router's tensors, the four more norms and expert LoRA.
TEST(MemoryEstimateActivationsMoe, Gemma4MatchesWhatAForwardKeepsOnTheCpu) {
  auto config = activations_config(model::Architecture::gemma4);
  config.moe = model::gemma4_moe_config(config.num_layers, 6, 2, 40);
  check_activations(config);
}

// Qwen3-MoE and Mixtral: 8 experts of width 88, top-2, on every layer, with LoRA dropout too
// (Mixtral keeps its routing weights in float32).
// Qwen3-MoE and Mixtral, one test each so that ctest runs them side by side.
class MemoryEstimateActivationsSparse : public testing::TestWithParam<model::Architecture> {};

TEST_P(MemoryEstimateActivationsSparse, MatchWhatAForwardKeepsOnTheCpu) {
  auto config = activations_config(GetParam());
  ASSERT_TRUE(config.moe.has_value());
  config.moe->sparse.assign(config.num_layers, true);
  config.moe->expert_intermediate_size = 88;
  check_activations(config);
}

INSTANTIATE_TEST_SUITE_P(Moe,
                         MemoryEstimateActivationsSparse,
                         testing::Values(model::Architecture::qwen3_moe, model::Architecture::mixtral),
                         [](const testing::TestParamInfo<model::Architecture>& info) {
                           return model::architecture_name(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(Architectures,
                         MemoryEstimateActivations,
                         testing::Values(model::Architecture::llama,
                                         model::Architecture::gemma2,
                                         model::Architecture::gemma3,
                                         model::Architecture::gemma4),
                         [](const testing::TestParamInfo<model::Architecture>& info) {
                           return model::architecture_name(info.param);
                         });

// A whole step's peak on the CPU, forward and backward, counted exactly in tensor bytes
// (TensorPeak), against what the plan reserves for it: the saved activations, the largest
// transient (a layer's recompute and backward, or the loss's chunk) and the LoRA gradients. The
// plan must never reserve less, and it reserves more: it counts a layer's saved tensors whole
// for the length of its backward while autograd frees each as its node runs, and the backward's
// gradients as if all were alive at once (2026-11-27: 1% to 13% more without checkpointing,
// 10% to 45% more with it, on these small layers). Bounded at 1.6 times, so that a gross
// over-count fails too.
void check_step_peak(const model::ModelConfig& config) {
  const auto dir = test::fresh_test_dir(true);
  model::write_random_model(dir, config, 4);
  const auto folder = io::HfFolder::open(dir);
  const int64_t batch = 2, seq = 256;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto ids = at::randint(config.vocab_size, {batch, seq}, gen, at::kLong);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    auto m = nf4_lora_model(folder, config, dtype, 0.0);
    for (const auto policy : {CheckpointPolicy::none, CheckpointPolicy::every_layer})
      for (const bool tiled : {false, true}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " +
                     (policy == CheckpointPolicy::none ? "no checkpointing" : "every layer checkpointed") +
                     (tiled ? ", MLPs tiled in 4 chunks" : ""));
        auto shape = cpu_shape(m, batch, seq, policy);
        shape.tiled_mlp = tiled;
        shape.tiled_mlp_shards = 4;
        const auto in = estimate_memory(config, shape);
        // As the planner adds them (offload/planner.cpp), less the batch, which exists before.
        int64_t saved = in.saved_outside_layers - 4 * batch * seq * 8, transient = in.loss_workspace;
        for (const auto& l : in.layers) {
          saved += l.checkpointed ? l.saved_checkpointed : l.saved_full;
          transient = std::max(transient, (l.checkpointed ? l.saved_full : 0) + l.backward_transient);
        }
        int64_t gradients = 0;
        for (const auto& p : m.lm.trainable_parameters()) gradients += p.numel() * 4;
        const int64_t planned = saved + transient + gradients;
        int64_t measured = 0;
        for (int run = 0; run < 2; ++run) {
          for (auto& p : m.lm.trainable_parameters()) p.mutable_grad() = at::Tensor();
          test::TensorPeakGuard tensors;
          LayerScheduler scheduler(m.lm);
          if (tiled) scheduler.tile_mlp(std::make_shared<TiledMlp>(4));
          const auto plan = scheduler.prepare_training(policy);
          scheduler.train_forward(plan, ids, ids).loss_sum.backward();
          measured = tensors->peak();
        }
        EXPECT_GE(planned, measured) << "planned " << planned << " B, measured " << measured << " B";
        EXPECT_LE(planned, 1.6 * static_cast<double>(measured))
            << "planned " << planned << " B, measured " << measured << " B";
      }
  }
  qtrain::engine::io::remove_tree(dir);
}

// One test per architecture, so that ctest runs them side by side (each takes a minute or more).
class MemoryEstimateStep : public testing::TestWithParam<model::Architecture> {};

TEST_P(MemoryEstimateStep, TheStepsPeakIsNeverAboveWhatThePlanReserves) {
  check_step_peak(activations_config(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Families,
    MemoryEstimateStep,
    testing::Values(model::Architecture::llama, model::Architecture::gemma2, model::Architecture::gemma4),
    [](const testing::TestParamInfo<model::Architecture>& info) { return model::architecture_name(info.param); });

TEST(MemoryEstimateStepMoe, TheStepsPeakOfQwen3MoeLayersIsNeverAboveWhatThePlanReserves) {
  auto qwen = activations_config(model::Architecture::qwen3_moe);
  qwen.moe->sparse.assign(qwen.num_layers, true);
  qwen.moe->expert_intermediate_size = 88;
  check_step_peak(qwen);
}

TEST(MemoryEstimateStepMoe, TheStepsPeakOfGemma4MoeLayersIsNeverAboveWhatThePlanReserves) {
  auto gemma = activations_config(model::Architecture::gemma4);
  gemma.moe = model::gemma4_moe_config(gemma.num_layers, 6, 2, 40);
  check_step_peak(gemma);
}

}  // namespace
}  // namespace qtrain::engine::schedule
