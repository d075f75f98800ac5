// The small llama that the offload and sharding tests train, CPU and GPU alike: written once per
// test process by qtrain's own init-model code (engine/model/init_model.h) into a temp folder,
// with a batch drawn from a seeded generator. No Python makes it, so the GPU tests build and run
// where the reference stack is absent or another version (the GPU machine's transformers is not
// the venv's); the parity tests keep the transformers-made fixtures (tests/reference.h).
// Its shapes are those of the transformers llama fixture: 3 layers, hidden 64, 4 heads over 2 kv
// heads, llama3 rope scaling, a 160-token vocabulary.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "engine/io/remove_tree.h"
#include "engine/model/init_model.h"
#include "engine/model/model_config.h"

namespace qtrain::test {

class LlamaFixture {
 public:
  std::filesystem::path base;  // a Hugging Face folder: config.json + model.safetensors
  at::Tensor ids;              // [2, 24] int64
  at::Tensor labels;           // [2, 24] int64: ids, with -100 over a prompt and a tail

  LlamaFixture()
      : base(std::filesystem::temp_directory_path() / ("qtrain_llama_fixture_" + std::to_string(::getpid()))) {
    const auto config =
        engine::model::ModelConfig::from_json(nlohmann::json{{"model_type", "llama"},
                                                             {"architectures", {"LlamaForCausalLM"}},
                                                             {"hidden_size", 64},
                                                             {"intermediate_size", 96},
                                                             {"num_hidden_layers", 3},
                                                             {"num_attention_heads", 4},
                                                             {"num_key_value_heads", 2},
                                                             {"vocab_size", 160},
                                                             {"max_position_embeddings", 256},
                                                             {"rms_norm_eps", 1e-6},
                                                             {"rope_parameters",
                                                              {{"rope_type", "llama3"},
                                                               {"rope_theta", 500000.0},
                                                               {"factor", 8.0},
                                                               {"low_freq_factor", 1.0},
                                                               {"high_freq_factor", 4.0},
                                                               {"original_max_position_embeddings", 64}}}},
                                              "the test llama fixture");
    engine::io::remove_tree(base);
    engine::model::write_random_model(base, config, /*seed=*/7);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    ids = at::randint(config.vocab_size, {2, 24}, gen, at::TensorOptions().dtype(at::kLong));
    labels = ids.clone();
    labels.index_put_({0, at::indexing::Slice(0, 5)}, -100);  // a masked prompt
    labels.index_put_({1, at::indexing::Slice(-3, at::indexing::None)}, -100);
  }
  ~LlamaFixture() {
    std::error_code ignored;
    engine::io::remove_tree(base, ignored);
  }
  LlamaFixture(const LlamaFixture&) = delete;
  LlamaFixture& operator=(const LlamaFixture&) = delete;
};

// Made once, by whichever thread (rank) asks first; removed when the process exits.
inline const LlamaFixture& llama_fixture() {
  static const LlamaFixture fixture;
  return fixture;
}

}  // namespace qtrain::test
