// A tiny LlamaForCausalLM as tensors and config.json (hidden 64, 2 layers, intermediate 128,
// vocab 128, 4 heads, 2 kv heads), for the tests that write and read model folders.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace qtrain::test {

// Random weights from `seed`: norms around 1, everything else normal(0, 0.05), in `dtype`.
inline std::vector<std::pair<std::string, at::Tensor>> tiny_llama(at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<std::pair<std::string, at::Tensor>> out;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
    at::Tensor t = norm ? 1 + 0.1 * at::randn(shape) : 0.05 * at::randn(shape);
    out.emplace_back(name, t.to(dtype));
  };
  add("model.embed_tokens.weight", {128, 64}, false);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {64}, true);
    add(p + "self_attn.q_proj.weight", {64, 64}, false);
    add(p + "self_attn.k_proj.weight", {32, 64}, false);
    add(p + "self_attn.v_proj.weight", {32, 64}, false);
    add(p + "self_attn.o_proj.weight", {64, 64}, false);
    add(p + "post_attention_layernorm.weight", {64}, true);
    add(p + "mlp.gate_proj.weight", {128, 64}, false);
    add(p + "mlp.up_proj.weight", {128, 64}, false);
    add(p + "mlp.down_proj.weight", {64, 128}, false);
  }
  add("model.norm.weight", {64}, true);
  add("lm_head.weight", {128, 64}, false);
  return out;
}

// `dtype` is config.json's "dtype" field ("float32", "bfloat16").
inline nlohmann::json tiny_llama_config(const std::string& dtype) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 128},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-6},
          {"tie_word_embeddings", false},
          {"dtype", dtype}};
}

}  // namespace qtrain::test
