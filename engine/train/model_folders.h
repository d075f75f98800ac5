// Whole model folders written from a run config: `qtrain merge` (the adapter folded into the
// base) and `qtrain quantize` (the base in bitsandbytes' pre-quantized layout). Each writes a
// folder transformers loads unchanged, its tokenizer, chat template and generation config
// included (engine/io/companion_files.h); the commands only check the output folder and print.
#pragma once

#include <cstdio>
#include <filesystem>

#include <c10/core/ScalarType.h>

#include "engine/config/run_config.h"

namespace qtrain::engine::train {

// base_model with `adapter` folded in, into `out` as `dtype` (float32 or bfloat16): the base's
// float weights (a pre-quantized base dequantized), sized to the run's vocabulary, expert and
// router LoRA, DoRA and modules trained in full included (Note [Merged tensors] in
// engine/model/merged_weights.cpp); the run's added tokens written into the tokenizer.
void write_merged_folder(const config::RunConfig& c,
                         const std::filesystem::path& adapter,
                         const std::filesystem::path& out,
                         at::ScalarType dtype,
                         std::FILE* log);

// base_model quantized as `c` says (load_in_4bit / load_in_8bit), into `out` in bitsandbytes'
// layout with its quantization_config; every other tensor as the source has it.
void write_quantized_folder(const config::RunConfig& c, const std::filesystem::path& out, std::FILE* log);

}  // namespace qtrain::engine::train
