// See init_model.h.
#include "engine/model/init_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "engine/io/hf_folder.h"
#include "engine/model/layer_tensors.h"

namespace qtrain::engine::model {
namespace {

constexpr double kInitializerRange = 0.02;  // transformers' default initializer_range

ModelConfig base_config(Architecture arch,
                        int64_t vocab,
                        int64_t hidden,
                        int64_t intermediate,
                        int64_t layers,
                        int64_t heads,
                        int64_t kv_heads,
                        int64_t max_pos) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = arch == Architecture::llama ? 500000.0 : 1000000.0;
  c.qkv_bias = arch == Architecture::qwen2;
  c.qk_norm = arch == Architecture::qwen3 || arch == Architecture::gemma3 || arch == Architecture::gemma4 ||
              arch == Architecture::qwen3_moe;
  c.sliding_window.assign(layers, std::nullopt);
  if (arch == Architecture::qwen3_moe || arch == Architecture::mixtral) {
    // 8 experts, top-2 on every layer, each expert a quarter of the dense width (Mixtral's
    // intermediate_size is its experts' width, so the dense width is not used there).
    MoeConfig m;
    m.num_experts = 8;
    m.top_k = 2;
    m.expert_intermediate_size = arch == Architecture::mixtral ? intermediate : intermediate / 4;
    m.norm_topk_prob = true;
    m.fp32_routing_weights = arch == Architecture::mixtral;
    m.sparse.assign(layers, true);
    c.moe = m;
  }
  if (arch == Architecture::mistral) c.sliding_window.assign(layers, max_pos / 2);
  if (arch == Architecture::gemma4) {
    // Gemma4TextConfig with the 26B-A4B's conventions (See Note [Gemma 4 decoder]): one full layer
    // in six and the last, full layers with heads twice as wide, a quarter of the kv heads (at
    // least 1) and no v_proj (attention_k_eq_v), proportional rope on them, a final cap of 30.
    c.gemma = true;
    c.tie_word_embeddings = true;
    c.hidden_act = Activation::gelu_tanh;
    c.final_logit_softcap = 30.0;
    c.rope_scaling.type = "proportional";
    c.rope_scaling.partial_rotary_factor = 0.25;
    c.sliding_rope = RopeParams{10000.0, {}};
    for (int64_t i = 0; i < layers; ++i) {
      const bool full = (i + 1) % 6 == 0 || i == layers - 1;
      if (!full) c.sliding_window[i] = max_pos / 2;
      c.layer_attention.push_back(full ? LayerAttention{2 * c.head_dim, std::max<int64_t>(1, kv_heads / 4), true}
                                       : LayerAttention{c.head_dim, kv_heads, false});
    }
  }
  if (arch == Architecture::gemma2 || arch == Architecture::gemma3) {
    // Gemma2Config / Gemma3TextConfig: tied, GeGLU, scores scaled by query_pre_attn_scalar^-0.5
    // (here head_dim's, as Gemma 2 27B does); Gemma 2 alternates sliding and full layers and caps
    // attention (50) and final (30) logits; Gemma 3 has one full layer in six and a local rope.
    c.gemma = true;
    c.tie_word_embeddings = true;
    c.hidden_act = Activation::gelu_tanh;
    c.query_pre_attn_scalar = static_cast<double>(c.head_dim);
    const bool g2 = arch == Architecture::gemma2;
    for (int64_t i = 0; i < layers; ++i) {
      if ((i + 1) % (g2 ? 2 : 6) != 0) c.sliding_window[i] = max_pos / 2;
    }
    if (g2) {
      c.rope_theta = 10000.0;
      c.attn_logit_softcap = 50.0;
      c.final_logit_softcap = 30.0;
    } else {
      c.sliding_rope = RopeParams{10000.0, {}};
    }
  }
  return c;
}

// Gemma's published shapes (head_dim 256 != hidden / heads, vocabularies of 256k and 262k).
ModelConfig gemma_shape(Architecture arch,
                        int64_t vocab,
                        int64_t hidden,
                        int64_t intermediate,
                        int64_t layers,
                        int64_t heads,
                        int64_t kv_heads,
                        int64_t max_pos,
                        int64_t window) {
  auto c = base_config(arch, vocab, hidden, intermediate, layers, heads, kv_heads, max_pos);
  c.head_dim = 256;
  if (c.query_pre_attn_scalar) c.query_pre_attn_scalar = 256.0;
  for (auto& w : c.sliding_window) {
    if (w) w = window;
  }
  for (auto& a : c.layer_attention) a.head_dim = a.k_eq_v ? 512 : 256;
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "tiny-moe", "demo", "small", "llama3.2-1b", "llama3-8b", "gemma2-2b", "gemma3-1b", "gemma4-26b-a4b"};
}

Architecture architecture_from_name(const std::string& name) {
  for (auto a : {Architecture::llama,
                 Architecture::mistral,
                 Architecture::qwen2,
                 Architecture::qwen3,
                 Architecture::gemma2,
                 Architecture::gemma3,
                 Architecture::gemma4,
                 Architecture::qwen3_moe,
                 Architecture::mixtral}) {
    if (architecture_name(a) == name) return a;
  }
  if (name == "gemma3") return Architecture::gemma3;
  if (name == "gemma4") return Architecture::gemma4;
  TORCH_CHECK(false,
              "architecture '",
              name,
              "' is not supported; choose llama, mistral, qwen2, qwen3, gemma2, gemma3 (gemma3_text), gemma4 "
              "(gemma4_text), qwen3_moe or mixtral");
}

ModelConfig preset_config(Architecture arch, const std::string& preset) {
  if (preset == "tiny") return base_config(arch, 256, 64, 128, 2, 4, 2, 512);
  // The tiny shapes with routed experts: Gemma 4's expert block (4 experts of width 32, top-2,
  // beside the dense MLP); Qwen3-MoE's and Mixtral's tiny models have theirs already.
  if (preset == "tiny-moe") {
    auto c = base_config(arch, 256, 64, 128, 2, 4, 2, 512);
    if (arch == Architecture::gemma4) c.moe = gemma4_moe_config(c.num_layers, 4, 2, 32);
    TORCH_CHECK(c.moe,
                "model preset 'tiny-moe' needs an architecture with experts: gemma4, qwen3_moe or mixtral, not ",
                architecture_name(arch));
    return c;
  }
  // The demo model: the byte-level vocabulary of data::ByteTokenizer (256 bytes + BOS, EOS, PAD).
  if (preset == "demo") return base_config(arch, 259, 256, 688, 4, 4, 2, 1024);
  if (preset == "small") return base_config(arch, 8192, 512, 1408, 8, 8, 4, 2048);
  // Llama-3.2-1B's shapes (tied embeddings): the size a one-call GPU check can make and train.
  if (preset == "llama3.2-1b") {
    auto c = base_config(arch, 128256, 2048, 8192, 16, 32, 8, 131072);
    c.tie_word_embeddings = true;
    if (arch == Architecture::llama) {
      c.rope_scaling.type = "llama3";
      c.rope_scaling.factor = 32.0;
    }
    return c;
  }
  if (preset == "llama3-8b") {
    auto c = base_config(arch, 128256, 4096, 14336, 32, 32, 8, 8192);
    if (arch == Architecture::llama) {
      c.rope_scaling.type = "llama3";
      c.rope_scaling.factor = 8.0;
    }
    return c;
  }
  // Gemma-2-2B and Gemma-3-1B (text) shapes, for plans with a 256k vocabulary and head_dim 256.
  if (preset == "gemma2-2b") return gemma_shape(arch, 256000, 2304, 9216, 26, 8, 4, 8192, 4096);
  if (preset == "gemma3-1b") return gemma_shape(arch, 262144, 1152, 6912, 26, 4, 1, 32768, 512);
  // Gemma-4-26B-A4B's shapes (reference: its config.json): head_dim 256 / 512 on full layers with
  // 2 kv heads, and on every layer the dense MLP (2112) and 128 experts of width 704, top-8.
  if (preset == "gemma4-26b-a4b") {
    auto c = gemma_shape(arch, 262144, 2816, 2112, 30, 16, 8, 262144, 1024);
    for (auto& a : c.layer_attention) {
      if (a.k_eq_v) a.num_kv_heads = 2;
    }
    if (arch == Architecture::gemma4) c.moe = gemma4_moe_config(c.num_layers, 128, 8, 704);
    return c;
  }
  TORCH_CHECK(false, "model preset '", preset, "' is not known; choose one of: ", c10::Join(", ", preset_names()));
}

ModelConfig first_layers(ModelConfig c, int64_t layers) {
  TORCH_CHECK(layers >= 1 && layers <= c.num_layers,
              "--layers ",
              layers,
              ": the preset has ",
              c.num_layers,
              " layers; give 1 to ",
              c.num_layers);
  const auto last_window = c.sliding_window.back();
  const auto last_attention = c.layer_attention.empty() ? std::nullopt : std::optional(c.layer_attention.back());
  c.num_layers = layers;
  c.sliding_window.resize(layers);
  if (last_attention) c.layer_attention.resize(layers);
  if (c.moe) c.moe->sparse.resize(layers);
  if (c.arch == Architecture::gemma4) {
    c.sliding_window.back() = last_window;
    if (last_attention) c.layer_attention.back() = *last_attention;
  }
  return c;
}

void write_random_model(const std::filesystem::path& dir, const ModelConfig& c, uint64_t seed, at::ScalarType dtype) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  auto normal = [&](std::vector<int64_t> shape) {
    return at::normal(0.0, kInitializerRange, shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
  };
  // Gemma 2 and 3's norms scale by (1 + w): transformers initialises them to zeros.
  const bool offset_norms = c.gemma && c.arch != Architecture::gemma4;
  auto norm = [&](int64_t n) {
    return offset_norms ? at::zeros({n}, at::TensorOptions().dtype(dtype))
                        : at::ones({n}, at::TensorOptions().dtype(dtype));
  };
  tensors.emplace_back("model.embed_tokens.weight", normal({c.vocab_size, c.hidden_size}));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const auto p = "model.layers." + std::to_string(i) + ".";
    // Note [Layer tensors]: the norms and linears (biases zero), then the sparse block.
    for (const auto& t : layer_tensors(c, i)) {
      tensors.emplace_back(p + t.module + ".weight", t.linear() ? normal(t.shape) : norm(t.shape[0]));
      if (t.bias) {
        tensors.emplace_back(p + t.module + ".bias", at::zeros({t.shape[0]}, at::TensorOptions().dtype(dtype)));
      }
    }
    std::vector<std::tuple<std::string, int64_t, int64_t>> linears;
    if (c.layer_is_sparse(i) && c.arch == Architecture::gemma4) {
      // Gemma4TextRouter (scales initialised to ones), the fused experts as transformers writes
      // them (the expert block's norms are in the table).
      const int64_t e = c.moe->num_experts, ei = c.moe->expert_intermediate_size, h = c.hidden_size;
      tensors.emplace_back(p + "router.proj.weight", normal({e, h}));
      tensors.emplace_back(p + "router.scale", norm(h));
      tensors.emplace_back(p + "router.per_expert_scale", norm(e));
      tensors.emplace_back(p + "experts.gate_up_proj", normal({e, 2 * ei, h}));
      tensors.emplace_back(p + "experts.down_proj", normal({e, h, ei}));
    } else if (c.layer_is_sparse(i)) {
      // The per-expert names transformers' save_pretrained writes (Note [Expert tensor names]).
      const bool mixtral = c.arch == Architecture::mixtral;
      const auto block = p + (mixtral ? "block_sparse_moe." : "mlp.");
      const int64_t ei = c.moe->expert_intermediate_size;
      linears.emplace_back(block.substr(p.size()) + "gate", c.moe->num_experts, c.hidden_size);
      for (int64_t e = 0; e < c.moe->num_experts; ++e) {
        const auto ex = block.substr(p.size()) + "experts." + std::to_string(e) + ".";
        linears.emplace_back(ex + (mixtral ? "w1" : "gate_proj"), ei, c.hidden_size);
        linears.emplace_back(ex + (mixtral ? "w3" : "up_proj"), ei, c.hidden_size);
        linears.emplace_back(ex + (mixtral ? "w2" : "down_proj"), c.hidden_size, ei);
      }
    }
    for (const auto& [name, out, in] : linears) tensors.emplace_back(p + name + ".weight", normal({out, in}));
    if (c.arch == Architecture::gemma4) tensors.emplace_back(p + "layer_scalar", norm(1));
  }
  tensors.emplace_back("model.norm.weight", norm(c.hidden_size));
  if (!c.tie_word_embeddings) tensors.emplace_back("lm_head.weight", normal({c.vocab_size, c.hidden_size}));
  auto json = c.to_json();
  json["dtype"] = dtype == at::kBFloat16 ? "bfloat16" : "float32";
  io::save_hf_folder(dir, json, tensors, int64_t{2} << 30);
}

}  // namespace qtrain::engine::model
