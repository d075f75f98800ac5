// See memory_estimate.h.
#include "engine/schedule/memory_estimate.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "engine/model/grouped_expert_linear.h"
#include "engine/model/layer_tensors.h"
#include "engine/model/moe_block.h"
#include "engine/model/saved_modules.h"
#include "engine/schedule/tiled_mlp.h"
#include "offload/blob_layout.h"
#include "ops/linear_int8.h"
#include "ops/nn/attention.h"
#include "ops/nn/cross_entropy.h"
#include "ops/quant/blockwise_8bit.h"

namespace qtrain::engine::schedule {
namespace {

// Note [What a layer keeps for backward]
// Counted from the code of a training forward (engine/model/decoder_layer.cpp, linear_layer.cpp,
// engine/lora/lora_linear.cpp, ops/nn/*, ops/linear_*) and from what each autograd node of
// libtorch saves; N = micro_batch_size * sequence_len tokens, s = bytes of the compute dtype,
// H hidden, I intermediate, qd = heads * head_dim, kvd = kv_heads * head_dim (the layer's own:
// Gemma 4's full layers differ), r the LoRA rank.
// Per layer that is not checkpointed:
// - each RMSNorm: its input in float32 (pow and mul save it) and the rsqrt per row: N (4H + 4);
//   Gemma 4's form, pow(mean + eps, -0.5), keeps the mean per row too: N (4H + 8). Qwen3's and
//   Gemma 3's q/k norms the same over q and k, Gemma 4's weightless v norm over v (on a k_eq_v
//   layer in float32 that input is k's output, which k's norm keeps already). Gemma has four
//   per layer (the (1 + w) multiply saves nothing more: w is frozen). The first layer's input
//   norm saves nothing: the embedding output needs no gradient (the embeddings are frozen);
// - a base linear (dense, 4-bit or int8) saves no activation: its weight does not require grad
//   (see Note [Quantized linear autograd] in ops/linear_4bit.cpp);
// - a LoRA adapter saves its input cast to float32 (the A matmul needs it for A's gradient) and
//   A's output [N, r] in float32 (for B's gradient). The cast is a copy per adapter in bf16/fp16;
//   in float32 it is the input itself, which q, k and v (and gate and up) share, and o's input is
//   a view of the attention output a fused kernel keeps anyway (Gemma 2's soft-capped attention
//   keeps no output: there o's input counts). With dropout it saves the
//   dropped-out copy (float32) and the mask per adapter instead: 1 byte per element from CUDA's
//   fused dropout, 4 from the CPU's (at::dropout multiplies by a float32 noise tensor there). The
//   mask is kept only for an input that needs a gradient: not for q, k and v of the first layer,
//   whose input is the normed embedding output;
// - rope saves only the shared cos/sin tables; the SwiGLU (and Gemma's GeGLU) saves gate's and
//   up's outputs and silu(gate) (gelu(gate)): 3 N I s;
// - attention: a fused kernel (flash, memory-efficient, the CPU's
//   flash) keeps q, k, v, its output and the float32 log-sum-exp per head and token, plus the
//   mask converted to the compute dtype when there is one ([B, 1, T, T] with segment ids,
//   [T, T] for a sliding window alone). With grouped-query heads on CUDA where flash cannot run
//   (a mask, head_dim over 256 as on Gemma 4's global layers, or float32), k and v are expanded
//   to every query head first, so the memory-efficient kernel takes them (Note [Which CUDA
//   attention kernel] in ops/nn/attention.cpp); the expanded copies are what it keeps. Gemma 2's soft-capped
//   attention runs unfused (ops/nn/attention.cpp): it keeps q, k and v expanded to every query
//   head, the tanh of the scores [B, heads, T, T] in s, the float32 probabilities and their cast
//   to s (the same tensor in float32), and the boolean mask; its backward holds two more [B,
//   heads, T, T] float32 gradients.
// A checkpointed layer keeps only its input, N H s (the checkpoint saves it; the rope tables and
// segments it also saves are shared by all layers). Its backward first recomputes what a full
// layer keeps, then adds the gradients: the incoming and the residual gradient (N H s each), the
// larger of the MLP's ([N, I] in s for the gradients of m, silu, up and gate, and one float32
// [N, I] from down's LoRA) and attention's (the fused kernel's q, k, v gradients and float32 dq
// accumulator), and the
// largest dequantized weight. These transients are an estimate, not a measurement.
// A sparse (MoE) layer's experts are counted as a dense MLP K experts wide (each token passes
// through K experts of width I: the SwiGLU and the LoRA inputs of gate_up and down per routed
// row), plus what routing and combining keep: the experts' outputs [N K, H] (s) that the
// weighting keeps, the float32 probabilities [N, E], four int64 [N K] indices (top-k's, the
// gather of the rows, the sort's permutation and its inverse: an index select keeps its
// indices, not the rows), the top-k weights selected per row ([N K], float32 where the routing
// weights are) and, where they are renormalised, the divide's weights [N K] and sums [N] in
// float32. The router's linear keeps no input: its weight is frozen. Gemma 4's layers count
// their experts beside the dense MLP, plus the selected per_expert_scale [N K] (float32) and
// four more RMSNorms (the router's weightless one and pre_feedforward_layernorm_2 over the same
// input, post_feedforward_layernorm_1 and _2 over the two branches). Which experts a batch
// touches and how unevenly does not change these: every routed row is one row of the grouped
// tensors. The weight bytes are exact.
// Outside the layers the step keeps the final norm's float32 input, the loss's normed input
// (N H s), the shifted labels, the rope tables (cos and sin, [B, 1, T, head_dim] in s) and the
// batch (4 int64 [B, T] tensors on the device). Gemma 3 and 4 have a second pair of rope tables
// (their sliding layers' own, Gemma 4's of another head_dim).

// qtrain's double quantization nests absmax in blocks of 256 (ops::quantize_4bit; bitsandbytes'
// pre-quantized checkpoints use the same).
constexpr int64_t kNestedBlocksize = 256;
constexpr int64_t kCodeEntries = 256;
// cuBLAS' default workspace (":4096:8", 8 x 4 MiB) and cuBLASLt's, each per handle and stream.
constexpr int64_t kCublasWorkspaceBytes = int64_t{64} << 20;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct Linear {
  std::string module;  // after "model.layers.<i>."
  int64_t out;
  int64_t in;
  bool present = true;  // v_proj is absent on Gemma 4's k_eq_v layers
  bool expert = false;  // one expert's gate_up or down (quantized as quantize_moe_experts says)
};

// The base weights of decoder layer `layer` in blob order (DecoderLayer::weight_linears): q, k,
// v (present = false on Gemma 4's k_eq_v layers), o, then gate, up, down where the layer has the
// dense MLP, then on a sparse layer each expert's gate_up [2I, H] and down [H, I].
std::vector<Linear> layer_linears(const model::ModelConfig& c, int64_t layer) {
  std::vector<Linear> out;
  for (const auto& t : model::layer_tensors(c, layer)) {
    if (!t.linear()) continue;
    out.push_back({t.module, t.shape[0], t.shape[1]});
    if (t.part == model::LayerPart::k && c.attention(layer).k_eq_v) {
      out.push_back({model::layer_part_module(model::LayerPart::v), t.shape[0], t.shape[1], false});
    }
  }
  if (c.layer_is_sparse(layer)) {
    const int64_t i = c.moe->expert_intermediate_size;
    for (int64_t e = 0; e < c.moe->num_experts; ++e) {
      const auto ex = c.moe->experts_path + "." + std::to_string(e) + ".";
      out.push_back({ex + "gate_up_proj", 2 * i, c.hidden_size, true, true});
      out.push_back({ex + "down_proj", c.hidden_size, i, true, true});
    }
  }
  return out;
}

// The element counts of layer `layer`'s trainable LoRA tensors: per adapted linear A [r, in] and
// B [out, r] (and DoRA's magnitude [out]); on an adapted router A [r, H] and B [E, r] (Note
// [Router LoRA]); per targeted expert
// parameter A [r E, in] and B [out, r E] (Note [Expert LoRA layout]).
std::vector<int64_t> lora_tensor_sizes(const model::ModelConfig& c, const lora::LoraConfig& lora, int64_t layer) {
  const std::string prefix = c.weight_prefix + "layers." + std::to_string(layer) + ".";
  std::vector<int64_t> sizes;
  for (const Linear& l : layer_linears(c, layer)) {
    if (l.present && !l.expert && lora.targets(prefix + l.module)) {
      const int64_t r = lora.rank_for(prefix + l.module);
      sizes.push_back(r * l.in);
      sizes.push_back(r * l.out);
      if (lora.use_dora) sizes.push_back(l.out);  // the magnitude
    }
  }
  if (c.layer_is_sparse(layer)) {
    const int64_t h = c.hidden_size, i = c.moe->expert_intermediate_size, e = c.moe->num_experts;
    const auto gate_up = prefix + c.moe->experts_path + ".gate_up_proj";
    const auto down = prefix + c.moe->experts_path + ".down_proj";
    const auto router = prefix + c.moe->router_path;
    if (model::targets_router(lora, *c.moe, router)) {
      const int64_t r = lora.rank_for(model::router_lora_path(*c.moe, router));
      sizes.insert(sizes.end(), {r * h, e * r});
      if (lora.use_dora) sizes.push_back(e);
    }
    if (lora.targets_parameter(gate_up)) {
      const int64_t re = lora.rank_for(gate_up) * e;
      sizes.insert(sizes.end(), {re * h, 2 * i * re});
    }
    if (lora.targets_parameter(down)) {
      const int64_t re = lora.rank_for(down) * e;
      sizes.insert(sizes.end(), {re * i, h * re});
    }
  }
  return sizes;
}

// Whether `lora` trains the token embeddings / the output head in full (modules_to_save).
struct TrainedInFull {
  bool embed_tokens = false, lm_head = false;
};

TrainedInFull trained_in_full(const model::ModelConfig& c, const lora::LoraConfig& lora) {
  TrainedInFull t;
  for (const std::string& m : lora.modules_to_save) {
    t.embed_tokens |= lora::LoraConfig::saved_module_entry_names(m, model::embed_tokens_module(c));
    t.lm_head |= lora::LoraConfig::saved_module_entry_names(m, model::kLmHeadModule);
  }
  return t;
}

bool is_4bit(const model::QuantSpec& q) {
  return q.kind == model::QuantSpec::Kind::nf4 || q.kind == model::QuantSpec::Kind::fp4;
}

// The scratch of dequantizing one [out, in] weight for a matmul.
int64_t dequantized_bytes(const Linear& l, const MemoryShape& shape) {
  const int64_t n = l.out * l.in, s = static_cast<int64_t>(c10::elementSize(shape.dtype));
  switch (shape.quant.kind) {
    case model::QuantSpec::Kind::none:
      return 0;
    case model::QuantSpec::Kind::int8:
      // On CUDA, Int8Weight::dequantize goes through two float32 [out, in] temporaries.
      return shape.device == c10::DeviceType::CUDA ? n * 8 : n * s;
    default:
      // Plus the float32 absmax that nested absmax is expanded to first.
      return n * s + (shape.quant.double_quant ? ceil_div(n, shape.quant.blocksize) * 4 : 0);
  }
}

// Whether the experts run the grouped kernel (MoeExperts::uses_grouped_kernel): on CUDA, experts
// without LLM.int8 products, widths 16-byte aligned in the compute dtype (the LoRA rank is taken
// to be).
bool grouped_experts(const model::ModelConfig& c, const MemoryShape& shape) {
  const int64_t s = static_cast<int64_t>(c10::elementSize(shape.dtype));
  const bool llm_int8 = shape.quantize_moe_experts && shape.quant.kind == model::QuantSpec::Kind::int8 &&
                        shape.quant.int8_compute == ops::Int8Compute::llm_int8;
  return shape.device == c10::DeviceType::CUDA && !llm_int8 && c.hidden_size * s % 16 == 0 &&
         c.moe->expert_intermediate_size * s % 16 == 0;
}

// The grouped kernel's workspace for one expert projection: as many experts' dequantized weights
// as fit shape.expert_workspace_bytes (at least one), plus one expert's dequantization scratch:
// the float32 absmax a nested absmax is expanded to, or INT8's two float32 temporaries on CUDA
// (Note [Grouped expert GEMM]).
int64_t grouped_workspace_bytes(const Linear& l, const MemoryShape& shape, int64_t num_experts) {
  const int64_t n = l.out * l.in, expert = n * static_cast<int64_t>(c10::elementSize(shape.dtype));
  const int64_t experts = std::min(num_experts, std::max<int64_t>(1, shape.expert_workspace_bytes / expert));
  int64_t scratch = 0;
  if (shape.quantize_moe_experts && is_4bit(shape.quant) && shape.quant.double_quant) {
    scratch = ceil_div(n, shape.quant.blocksize) * 4;
  } else if (shape.quantize_moe_experts && shape.quant.kind == model::QuantSpec::Kind::int8) {
    scratch = n * 8;
  }
  return experts * expert + scratch;
}

// Bytes of the float32 LoRA inputs that adapters on linears sharing one input [N, in] save, and
// of their A outputs; `ranks`: each such linear's LoRA rank, 0 where it has no adapter;
// `input_kept`: the input is a float32 tensor some other node keeps anyway; `input_needs_grad`:
// false for the first layer's attention input (no dropout mask is kept). See Note [What a layer
// keeps for backward].
int64_t lora_saved(std::initializer_list<int64_t> ranks,
                   int64_t in,
                   int64_t tokens,
                   const MemoryShape& shape,
                   bool input_kept = false,
                   bool input_needs_grad = true) {
  const int64_t adapters = std::count_if(ranks.begin(), ranks.end(), [](int64_t r) { return r > 0; });
  if (adapters == 0) return 0;
  const int64_t r = std::accumulate(ranks.begin(), ranks.end(), int64_t{0});
  int64_t inputs = 0;
  if (shape.lora.dropout > 0) {
    const int64_t mask = !input_needs_grad ? 0 : shape.device == c10::DeviceType::CUDA ? 1 : 4;
    inputs = adapters * tokens * in * (4 + mask);
  } else if (shape.dtype == at::kFloat) {
    inputs = input_kept ? 0 : tokens * in * 4;
  } else {
    inputs = adapters * tokens * in * 4;
  }
  return inputs + tokens * r * 4;
}

// What an RMSNorm keeps per row besides its float32 input: the rsqrt, and for Gemma 4's form
// (pow(mean + eps, -0.5)) the mean too.
int64_t norm_row_bytes(const model::ModelConfig& c) {
  return c.arch == model::Architecture::gemma4 ? 8 : 4;
}

offload::LayerCost layer_cost(const model::ModelConfig& c, const MemoryShape& shape, int64_t layer) {
  const int64_t B = shape.micro_batch_size, T = shape.sequence_len, N = B * T;
  const int64_t s = static_cast<int64_t>(c10::elementSize(shape.dtype));
  const int64_t H = c.hidden_size;
  const auto attention = c.attention(layer);
  const int64_t kv_heads = attention.num_kv_heads;
  const int64_t qd = c.num_heads * attention.head_dim, kvd = kv_heads * attention.head_dim;
  const auto linears = layer_linears(c, layer);
  const std::string prefix = c.weight_prefix + "layers." + std::to_string(layer) + ".";
  // A linear's LoRA rank, 0 without an adapter.
  auto targeted = [&](const Linear& l) -> int64_t {
    return l.present && shape.lora.targets(prefix + l.module) ? shape.lora.rank_for(prefix + l.module) : 0;
  };
  std::array<int64_t, 7> adapted{};  // q, k, v, o, and the dense MLP's gate, up, down: their ranks
  for (size_t j = 0; j < 4; ++j) adapted[j] = targeted(linears[j]);
  const bool sparse = c.layer_is_sparse(layer), dense_mlp = c.layer_has_dense_mlp(layer);
  if (dense_mlp) {
    for (size_t j = 4; j < 7; ++j) adapted[j] = targeted(linears[j]);
  }
  // The experts as a dense MLP K experts wide over the routed rows (see the Note).
  const int64_t experts_i = sparse ? c.moe->top_k * c.moe->expert_intermediate_size : 0;
  const int64_t I = (dense_mlp ? c.intermediate_size : 0) + experts_i;
  const auto experts = sparse ? prefix + c.moe->experts_path : std::string();
  // The experts' LoRA ranks (per expert), 0 without an adapter.
  auto expert_rank = [&](const std::string& parameter) -> int64_t {
    return sparse && shape.lora.targets_parameter(experts + parameter) ? shape.lora.rank_for(experts + parameter) : 0;
  };
  const int64_t gate_up_adapted = expert_rank(".gate_up_proj"), down_adapted = expert_rank(".down_proj");
  const auto router = sparse ? prefix + c.moe->router_path : std::string();
  const int64_t router_adapted = sparse && model::targets_router(shape.lora, *c.moe, router)
                                     ? shape.lora.rank_for(model::router_lora_path(*c.moe, router))
                                     : 0;

  const auto& window = c.sliding_window.at(layer);
  const bool windowed = window && *window < T;
  const bool masked = shape.segment_mask || windowed;
  // The boolean mask converted to the compute dtype: per row with segments, else one [T, T].
  const int64_t mask_bytes = !masked ? 0 : (shape.segment_mask ? B : 1) * T * T * s;
  // k and v as the kernel keeps them: expanded to every query head where flash cannot run on CUDA.
  const bool expanded = ops::attention_expands_kv(
      shape.device == c10::DeviceType::CUDA, shape.dtype, c.num_heads, kv_heads, attention.head_dim, masked);
  const int64_t kv_kept = expanded ? qd : kvd;

  offload::LayerCost cost;
  cost.saved_checkpointed = N * H * s;
  const int64_t norms = c.gemma ? 4 : 2, row = norm_row_bytes(c);
  int64_t saved = (layer == 0 ? norms - 1 : norms) * N * (H * 4 + row);  // the RMSNorms
  if (c.qk_norm) saved += N * (qd + kvd) * 4 + N * (c.num_heads + kv_heads) * row;
  if (c.arch == model::Architecture::gemma4) {
    // The v norm; on a k_eq_v layer in float32 its input is k's output, which k's norm keeps.
    const bool input_kept = attention.k_eq_v && c.qk_norm && s == 4;
    saved += (input_kept ? 0 : N * kvd * 4) + N * kv_heads * row;
  }
  // The first layer's input needs a gradient only when the embeddings train.
  const bool input_needs_grad = layer != 0 || trained_in_full(c, shape.lora).embed_tokens;
  saved += lora_saved({adapted[0], adapted[1], adapted[2]}, H, N, shape, false, input_needs_grad);
  // o's input is a view of a fused attention kernel's output, which the kernel keeps; the
  // soft-capped attention keeps no output.
  saved += lora_saved({adapted[3]}, qd, N, shape, /*input_kept=*/!c.attn_logit_softcap);
  if (dense_mlp) {
    saved += lora_saved({adapted[4], adapted[5]}, H, N, shape);
    saved += lora_saved({adapted[6]}, c.intermediate_size, N, shape);
  }
  saved += 3 * N * I * s;  // SwiGLU / GeGLU, the dense MLP's and the experts'
  if (sparse) {
    const int64_t routed = N * c.moe->top_k;  // rows through the experts
    // Expert LoRA never drops out (PEFT refuses lora_dropout on parameters; qtrain's is 0 there
    // whatever the run's lora_dropout).
    auto experts_shape = shape;
    experts_shape.lora.dropout = 0;
    saved += lora_saved({gate_up_adapted}, H, routed, experts_shape);
    saved += lora_saved({down_adapted}, c.moe->expert_intermediate_size, routed, experts_shape);
    // The router's adapter over every token: Gemma 4's router.proj drops out as a linear does,
    // a router weight (target_parameters) never.
    saved += lora_saved({router_adapted}, H, N, c.moe->router_is_linear ? shape : experts_shape);
    // Routing and combining (Note [What a layer keeps for backward]): the float32 probabilities
    // [N, E]; four int64 [N K] indices (top-k's, the rows' gather, the sort permutation and its
    // inverse); the top-k weights as selected per row; and the renormalisation's divide, which
    // keeps the weights and their sum per token.
    const bool normalize = c.moe->norm_topk_prob || c.moe->dense_mlp_too;
    const int64_t weight_bytes = c.moe->fp32_routing_weights || c.moe->dense_mlp_too ? 4 : s;
    saved += routed * H * s;  // the experts' outputs, which the weighting keeps
    saved += N * c.moe->num_experts * 4 + 4 * routed * 8 + routed * weight_bytes;
    if (normalize) saved += routed * 4 + N * 4;
    if (c.moe->dense_mlp_too) {
      // Gemma 4: the selected per_expert_scale [N K] (float32), and four more RMSNorms (the
      // router's weightless one and pre_feedforward_layernorm_2 over h1, post_feedforward_layernorm_1
      // and _2 over the two branches), each keeping its rsqrt and mean per row; h1's float32 copy
      // for the first two only outside float32, where pre_feedforward_layernorm keeps h1 itself.
      saved += routed * 4;
      saved += (s == 4 ? 2 : 4) * N * H * 4 + 4 * N * row;
    }
  }
  int64_t attention_transient = 0;
  if (c.attn_logit_softcap) {
    const int64_t scores = B * c.num_heads * T * T;
    const int64_t bool_mask = (shape.segment_mask ? B : 1) * T * T;
    saved += 3 * N * qd * s + scores * (s + 4 + (s == 4 ? 0 : s)) + bool_mask;
    attention_transient = 3 * N * qd * s + 2 * scores * 4;
  } else {
    saved += N * (2 * qd + 2 * kv_kept) * s + N * c.num_heads * 4 + mask_bytes;
    attention_transient = N * (qd + 2 * kv_kept) * s + N * qd * 4;
  }
  int64_t mlp_transient = N * I * (4 * s + 4);
  const int64_t shards = shape.tiled_mlp && dense_mlp ? tiled_mlp_shards(shape.tiled_mlp_shards, N) : 1;
  if (shards > 1) {
    // Tiled MLP: the layer keeps the MLP's input instead of what the dense MLP keeps; its backward
    // rebuilds one chunk at a time (the largest, n tokens) beside the input's whole gradient.
    const int64_t n = (N + shards - 1) / shards, Id = c.intermediate_size;
    const auto dense_saved = [&](int64_t tokens) {
      return lora_saved({adapted[4], adapted[5]}, H, tokens, shape) + lora_saved({adapted[6]}, Id, tokens, shape) +
             3 * tokens * Id * s;
    };
    saved += N * H * s - dense_saved(N);
    mlp_transient = std::max(dense_saved(n) + n * Id * (4 * s + 4) + N * H * s, N * experts_i * (4 * s + 4));
  }
  // DoRA (Note [DoRA] in engine/lora/lora_linear.h): each adapted linear keeps the base output (s)
  // and its LoRA product (float32) for the magnitude's scaling, and with dropout the float32
  // weight that its F.linear on the dropped-out input keeps; its forward makes the weight in
  // float32, B A and their sum beside the dequantized weight.
  int64_t dora_copy = 0;
  if (shape.lora.use_dora) {
    for (const Linear& l : linears) {
      if (l.expert || targeted(l) == 0) continue;
      saved += N * l.out * (s + 4) + (shape.lora.dropout > 0 ? l.out * l.in * 4 : 0);
      dora_copy = std::max(dora_copy, l.out * l.in * (s + 12));
    }
  }
  cost.saved_full = saved;

  int64_t dequantized = dora_copy;
  const bool grouped = sparse && grouped_experts(c, shape);
  for (const Linear& l : linears) {
    if (l.expert && grouped) {
      dequantized = std::max(dequantized, grouped_workspace_bytes(l, shape, c.moe->num_experts));
    } else if (!l.expert || shape.quantize_moe_experts) {
      dequantized = std::max(dequantized, dequantized_bytes(l, shape));
    }
  }
  cost.backward_transient = 2 * N * H * s + std::max(mlp_transient, attention_transient) + dequantized;
  return cost;
}

}  // namespace

std::vector<int64_t> layer_weight_nbytes(const model::ModelConfig& config,
                                         int64_t layer,
                                         const model::QuantSpec& layer_quant,
                                         at::ScalarType dtype,
                                         bool quantize_moe_experts) {
  std::vector<int64_t> out;
  for (const Linear& l : layer_linears(config, layer)) {
    if (!l.present) continue;
    const int64_t n = l.out * l.in;
    const model::QuantSpec quant = l.expert && !quantize_moe_experts ? model::QuantSpec{} : layer_quant;
    if (is_4bit(quant)) {
      const int64_t blocks = ceil_div(n, quant.blocksize);
      out.push_back((n + 1) / 2);  // two codes per byte
      if (quant.double_quant) {
        out.push_back(blocks);                                  // qabsmax
        out.push_back(ceil_div(blocks, kNestedBlocksize) * 4);  // absmax2
        out.push_back(kCodeEntries * 4);                        // code
      } else {
        out.push_back(blocks * 4);
      }
    } else if (quant.kind == model::QuantSpec::Kind::int8) {
      out.push_back(n);          // CB
      out.push_back(l.out * 4);  // SCB
    } else {
      out.push_back(n * static_cast<int64_t>(c10::elementSize(dtype)));
    }
  }
  return out;
}

offload::PlanInputs estimate_memory(const model::ModelConfig& c, const MemoryShape& shape) {
  TORCH_CHECK(c.num_layers > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.vocab_size > 0,
              "estimate_memory: the model config has no layers or sizes (layers ",
              c.num_layers,
              ", hidden ",
              c.hidden_size,
              ", intermediate ",
              c.intermediate_size,
              ", vocab ",
              c.vocab_size,
              ")");
  TORCH_CHECK(shape.micro_batch_size >= 1 && shape.sequence_len >= 1,
              "estimate_memory: micro_batch_size ",
              shape.micro_batch_size,
              " and sequence_len ",
              shape.sequence_len,
              " must be at least 1");
  const int64_t B = shape.micro_batch_size, T = shape.sequence_len, N = B * T;
  const int64_t s = static_cast<int64_t>(c10::elementSize(shape.dtype));
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;

  offload::PlanInputs in;
  in.micro_batches_per_step = shape.micro_batches_per_step;
  if (shape.optimizer_8bit) in.lora_what = "float32, AdamW moments in 8 bits";
  // The per-layer norms, layer_scalar, biases and MoE routers ([E, H] per sparse layer, and
  // Gemma 4's scales; never quantized or offloaded), all in the compute dtype.
  int64_t layers_resident = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const auto a = c.attention(i);
    const int64_t qd = c.num_heads * a.head_dim, kvd = a.num_kv_heads * a.head_dim;
    layers_resident += (c.gemma ? 4 : 2) * H;  // input and post-attention (Gemma: and feed-forward) norms
    if (c.qk_norm) layers_resident += 2 * a.head_dim;
    if (c.arch == model::Architecture::gemma4) layers_resident += 1;  // layer_scalar
    if (c.qkv_bias) layers_resident += qd + (a.k_eq_v ? 1 : 2) * kvd;
    if (c.o_bias) layers_resident += H;
    if (c.mlp_bias) layers_resident += 2 * I + H;
    if (c.layer_is_sparse(i)) layers_resident += c.moe->num_experts * H;  // the router
    // Gemma 4's router scale and per_expert_scale, and its three expert-block norms.
    if (c.layer_is_sparse(i) && c.moe->dense_mlp_too) layers_resident += H + c.moe->num_experts + 3 * H;
  }
  // Embeddings, the output head unless tied, the final norm, the layers' resident tensors (all in
  // the compute dtype) and the float32 rope frequencies of each kind of layer.
  const int64_t rope_dims = c.rope_head_dim(false) + (c.sliding_rope ? c.rope_head_dim(true) : 0);
  in.fixed_bytes = ((c.tie_word_embeddings ? 1 : 2) * V * H + H + layers_resident) * s + rope_dims / 2 * 4;

  for (int64_t i = 0; i < c.num_layers; ++i) {
    offload::LayerCost cost = layer_cost(c, shape, i);
    cost.blob_bytes =
        offload::blob_bytes(layer_weight_nbytes(c, i, shape.quant, shape.dtype, shape.quantize_moe_experts));
    cost.checkpointed = shape.checkpoint == CheckpointPolicy::every_layer ||
                        (shape.checkpoint == CheckpointPolicy::every_kth && i % shape.checkpoint_every_k == 0);
    in.layers.push_back(cost);
    // Weights and gradients in float32 (and the reference's copy of the weights); AdamW's two
    // moments in float32, or 8-bit blockwise per tensor when the optimizer is 8-bit.
    const int64_t copies = shape.reference_copy ? 3 : 2;
    for (const int64_t n : lora_tensor_sizes(c, shape.lora, i)) {
      in.lora_bytes += n * 4 * copies + (shape.optimizer_8bit ? ops::adam_8bit_moments_nbytes(n) : n * 4 * 2);
    }
  }

  // The modules trained in full: a float32 copy [V, H] each, with its gradient and moments as a
  // LoRA tensor has (Note [Modules trained in full]).
  const auto full = trained_in_full(c, shape.lora);
  for (const bool trained : {full.embed_tokens, full.lm_head}) {
    if (trained) {
      in.lora_bytes += V * H * 4 * (shape.reference_copy ? 3 : 2) +
                       (shape.optimizer_8bit ? ops::adam_8bit_moments_nbytes(V * H) : V * H * 4 * 2);
    }
  }

  const int64_t rope_rows = shape.per_row_positions ? B : 1;
  in.saved_outside_layers =
      N * (H * 4 + norm_row_bytes(c)) + N * H * s + N * 8 + 2 * rope_rows * T * rope_dims * s + 4 * N * 8;
  // One chunk of logits (Note [Loss chunk size]) and the gradient of the loss's input [N, H].
  const bool softcap = c.final_logit_softcap.has_value();
  const int64_t chunk = std::min(ops::cross_entropy_chunk_tokens(V, shape.dtype, softcap), N);
  in.loss_workspace = chunk * V * ops::cross_entropy_bytes_per_logit(shape.dtype, softcap) + N * H * s;
  // A trained head outside float32: its copy in the compute dtype, which the loss keeps, and that
  // copy's gradient before it is cast into the float32 one.
  if (full.lm_head && s < 4) in.loss_workspace += 2 * V * H * s;
  in.library_workspace = shape.device == c10::DeviceType::CUDA ? kCublasWorkspaceBytes : 0;
  return in;
}

}  // namespace qtrain::engine::schedule
