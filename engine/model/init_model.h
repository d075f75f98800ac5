// Random Hugging Face model folders: the tiny models the tests and the demo train, and
// model-shaped stand-ins for benchmarks (nothing is downloaded). Weights are drawn as
// transformers initialises them (normal(0, initializer_range) for embeddings and linears, ones
// for norms and Gemma 4's layer_scalar, zeros for Gemma 2/3's (1 + w) norms and for biases) from a seeded generator,
// and written with config.json so that transformers loads the folder unchanged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/model_config.h"

namespace qtrain::engine::model {

// Presets by name: "tiny" (2 layers, hidden 64), "tiny-moe" (the same with Gemma 4's expert
// block; gemma4, qwen3_moe and mixtral only), "demo" (4 layers, hidden 256, the 259-token
// byte vocabulary of the built-in tokenizer), "small" (8 layers, hidden 512: CPU memory
// benchmarks), "llama3-8b" (Llama-3-8B shapes, 32 layers, hidden 4096), "gemma2-2b" and
// "gemma3-1b" (Gemma-2-2B and Gemma-3-1B shapes: head_dim 256, vocabularies of 256000 and 262144),
// "gemma4-26b-a4b" (Gemma-4-26B-A4B's shapes; with --arch gemma4 its 128 experts, top-8, beside the dense MLP).
// Any preset takes any architecture's conventions (Gemma: tied, GeGLU, sliding layers, soft-caps;
// qwen3_moe and mixtral: 8 experts, top-2, on every layer).
// Unknown names are an error listing these.
ModelConfig preset_config(Architecture arch, const std::string& preset);
// The first `layers` layers of `c` (1 .. c.num_layers), each with its own shape; a Gemma 4 model
// keeps its last layer full, as transformers requires, by giving the new last layer the old last
// layer's attention. For benchmarks of a large model's layers on a small disk.
ModelConfig first_layers(ModelConfig c, int64_t layers);
std::vector<std::string> preset_names();
Architecture architecture_from_name(const std::string& name);

// Writes `config` with random weights (float32 or bfloat16 `dtype`) to `dir`, sharded above 2 GiB.
void write_random_model(const std::filesystem::path& dir,
                        const ModelConfig& config,
                        uint64_t seed,
                        at::ScalarType dtype = at::kFloat);

}  // namespace qtrain::engine::model
