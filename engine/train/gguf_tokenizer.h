// The tokenizer keys of a GGUF file, as llama.cpp's converter (convert_hf_to_gguf.py and gguf's
// SpecialVocab) writes them. See Note [GGUF tokenizer].
//
// Note [GGUF tokenizer]
// Two vocabularies, chosen as the converter chooses them:
// - "llama" (SentencePiece) where the base folder has tokenizer.model and the GGUF architecture
//   is llama or Gemma (the converter's _set_vocab_sentencepiece): tokenizer.ggml.pre "default";
//   every id below the embeddings' rows starts as "[PADn]", score -10000, type unused; each
//   piece of tokenizer.model below that takes its text, score and type (unknown, control,
//   unused, byte, else normal: a user-defined piece is normal); added_tokens.json's tokens are
//   user-defined with score -1000; tokenizer_config.json's added_tokens_decoder entries become
//   control (special, or looking special: <pad>, <mask>, <2mass>, [@BOS@], <|...|>, <｜...｜>,
//   <unused...>) or user-defined (U+2581 shown as a space), score -1000; Gemma writes
//   add_space_prefix false.
// - "gpt2" (byte-level BPE tokenizer.json): every id below the rows as a token (missing ids
//   "[PADn]", type unused), types normal / control (special added tokens) / user-defined (other
//   added tokens), merges "a b", add_space_prefix (the ByteLevel pre-tokenizer's), and
//   tokenizer.ggml.pre: the converter's name for the sha256 of str() of the ids the tokenizer
//   gives its fixed check text (qtrain's tokenizer gives transformers' ids, so the same hash),
//   from the converter's table for the families qtrain reads.
// Then both, as gguf's SpecialVocab: the ids of tokenizer_config.json's bos, eos, unk, sep, pad,
// cls and mask tokens among tokenizer.json's added tokens (else config.json's <role>_token_id),
// add_bos_token / add_eos_token / add_sep_token (tokenizer_config.json's booleans, else whether
// the post-processor's single template starts with the bos / ends with the eos token, and
// whether its pair template puts the sep or eos token between A and B; unwritten
// where neither says, but a "gpt2" vocabulary's add_bos_token, false then, as llama.cpp's own
// conversion of SmolLM2 has it), and the chat template. A SentencePiece-style tokenizer.json
// (byte_fallback) without tokenizer.model is refused: the converter would write placeholder
// scores (Llama) or fail (Gemma).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/data/text_tokenizer.h"
#include "engine/io/gguf_writer.h"

namespace qtrain::engine::train {

// llama.cpp's tokenizer.ggml.pre for `tokenizer` (Note [GGUF tokenizer]); an error naming the
// hash when the converter's table has no entry for it.
std::string gguf_pre_tokenizer(const data::TextTokenizer& tokenizer);

// The tokenizer of the base folder `base` for a model with `rows` embedding rows, exported as
// GGUF architecture `arch`; `pre` names tokenizer.ggml.pre where the hash is not in qtrain's
// table (empty: from the hash).
void add_gguf_tokenizer(io::GgufWriter& w,
                        const std::filesystem::path& base,
                        int64_t rows,
                        const std::string& arch,
                        const data::TextTokenizer& tokenizer,
                        const std::string& pre,
                        std::FILE* log);

}  // namespace qtrain::engine::train
