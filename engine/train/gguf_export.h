// `qtrain export-gguf`: the merged model (the base's float weights with the adapter folded in,
// as `qtrain merge` computes them) as one GGUF file that llama.cpp, Ollama and LM Studio load,
// written as llama.cpp's converter (convert_hf_to_gguf.py) writes it. See Note [GGUF export].
//
// Note [GGUF export]
// Llama and Mistral (GGUF architecture "llama"), Qwen2 ("qwen2") and Qwen3 ("qwen3"):
// - tensor names: token_embd, output_norm, output (absent with tied embeddings), and per layer
//   blk.N.attn_norm, attn_q, attn_k, attn_v, attn_output (with .bias where the model has them),
//   attn_q_norm, attn_k_norm (Qwen3), ffn_norm, ffn_gate, ffn_up, ffn_down;
// - "llama" models' q and k rows are permuted from transformers' rotate-half layout to ggml's
//   interleaved pairs (LlamaModel.permute: per head, reshape to [2, head_dim / 2] and swap);
// - 1-D tensors (norms, biases) are F32; the others in the chosen type (Q8_0 needs rows of a
//   multiple of 32; a tensor that has not is written F16, as the converter does);
// - architecture keys: context_length, embedding_length, feed_forward_length, block_count,
//   attention.head_count, head_count_kv, layer_norm_rms_epsilon, rope.freq_base,
//   rope.dimension_count, vocab_size (key_length and value_length where head_dim is not
//   hidden / heads); general.architecture, name, file_type, quantization_version; Llama 3's
//   "llama3" rope as the converter writes it, a rope_freqs tensor of the factor dividing each
//   frequency (its original context from rope_scaling, where transformers reads it);
// - the tokenizer (BPE tokenizer.json, "gpt2"): every id below the embeddings' rows as a token
//   (missing ids "[PADn]", type unused), types normal / control (special added tokens) /
//   user-defined (other added tokens), merges "a b", bos / eos / unk / padding ids from
//   tokenizer_config.json, add_bos_token (its key, else whether the post-processor's template
//   starts with a special token), add_space_prefix (the ByteLevel pre-tokenizer's), the chat
//   template, and tokenizer.ggml.pre: the converter's name for the sha256 of str() of the ids
//   the tokenizer gives its fixed check text (qtrain's tokenizer gives transformers' ids, so the
//   same hash), from the converter's table for the families qtrain reads.
// The adapter alone: write_gguf_adapter below.
// Not yet: Gemma, the MoE families, other rope scaling (linear, YaRN), a run that adds tokens, SentencePiece-model
// tokenizers, streaming the tensors from the base.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/config/run_config.h"
#include "engine/data/text_tokenizer.h"
#include "ops/quant/ggml_types.h"

namespace qtrain::engine::train {

// llama.cpp's tokenizer.ggml.pre for `tokenizer` (Note [GGUF export]); an error naming the hash
// when the converter's table has no entry for it.
std::string gguf_pre_tokenizer(const data::TextTokenizer& tokenizer);

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
