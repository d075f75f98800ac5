// `qtrain export-gguf`: the merged model (the base's float weights with the adapter folded in,
// as `qtrain merge` computes them) as one GGUF file that llama.cpp, Ollama and LM Studio load,
// written as llama.cpp's converter (convert_hf_to_gguf.py) writes it. See Note [GGUF export].
//
// Note [GGUF export]
// - the architecture, its keys and its tensors' names and values as Note [GGUF architectures]
//   (gguf_architecture.h) says; general.architecture, name, file_type, quantization_version;
//   Llama 3's "llama3" rope as the converter writes it, a rope_freqs tensor of the factor
//   dividing each frequency (its original context from rope_scaling, where transformers reads it);
// - 1-D tensors (norms, biases) are F32; the others in the chosen type (Q8_0 needs rows of a
//   multiple of 32; a tensor that has not is written F16, as the converter does);
// - the tokenizer as Note [GGUF tokenizer] (gguf_tokenizer.h) says.
// The adapter alone: write_gguf_adapter below.
// Not yet: Gemma 4, other rope scaling (YaRN; linear on "llama"), a run that adds tokens,
// streaming the tensors from the base.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/config/run_config.h"
#include "ops/quant/ggml_types.h"

namespace qtrain::engine::train {

// base_model with `adapter` folded in (none: the base), as `type`, into `out`; `pre` names
// tokenizer.ggml.pre where the hash is not in qtrain's table (empty: from the hash).
void write_gguf(const config::RunConfig& c,
                const std::filesystem::path& adapter,
                const std::filesystem::path& out,
                ops::GgmlType type,
                const std::string& pre,
                std::FILE* log);

// The adapter alone (`adapter`, else lora_model_dir) as a GGUF LoRA file, as llama.cpp's
// convert_lora_to_gguf.py writes it: general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and per adapted linear layer "<its GGUF tensor>.lora_a" [r, in] and
// ".lora_b" [out, r] (Llama's q / k rows of B permuted as the weights are). llama.cpp scales each
// pair by alpha / r, so the alpha written is scaling x r, which must be one value for all layers
// (rsLoRA included); expert and router LoRA, DoRA and modules trained in full are refused.
void write_gguf_adapter(const config::RunConfig& c,
                        const std::filesystem::path& adapter,
                        const std::filesystem::path& out,
                        ops::GgmlType type,
                        std::FILE* log);

}  // namespace qtrain::engine::train
