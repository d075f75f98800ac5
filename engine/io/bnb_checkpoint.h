// bitsandbytes pre-quantized checkpoints ("bnb-4bit" and LLM.int8 models on the Hub): reading
// their serialized quantized linears into qtrain's quantized weights, and writing qtrain's
// quantized weights in exactly the form bitsandbytes and transformers write and load.
//
// 4-bit (Linear4bit._save_to_state_dict with QuantState.as_dict(packed=True)), per weight W:
//   W                                        uint8 [(n+1)/2, 1]  packed codes (or another
//                                                                quant_storage dtype, same bytes)
//   W.absmax                                 float32 [blocks], or uint8 [blocks] when nested
//   W.quant_map                              float32 [16]        the NF4 / FP4 table
//   W.nested_absmax, W.nested_quant_map      float32             nested (double quant) only
//   W.quant_state.bitsandbytes__nf4 | __fp4  uint8 [len]         json.dumps of the other fields
// 8-bit (Linear8bitLt), per module M: M.weight int8 [out, in] (CB), M.SCB float32 [out] (row
// absmax), M.weight_format uint8 scalar 0 ("row").
// This is what bitsandbytes' Params4bit/Int8Params state dicts hold (docs/FORMATS.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/hf_folder.h"
#include "ops/quant/int8.h"
#include "ops/quant/kbit.h"

namespace qtrain::engine::io {

// --- 4-bit ---------------------------------------------------------------------------------

// Whether `weight_name` (e.g. "model.layers.0.mlp.down_proj.weight") has a quant_state blob.
bool is_bnb_4bit(const HfFolder& folder, const std::string& weight_name);
// Every weight of the folder that has one, sorted.
std::vector<std::string> bnb_4bit_weight_names(const HfFolder& folder);

// The packed weight and its QuantState, as zero-copy views of the mapped checkpoint (no float
// copy is made; a quant_storage other than uint8 is viewed as its bytes). Everything is checked
// first: the blob's fields and dtype strings, the shape against the packed bytes, every tensor's
// dtype and size, and the quant_map against qtrain's table for the quant type (qtrain
// dequantizes with the standard NF4/FP4 tables only). Errors name the file, the key and the fix.
ops::Packed4bit read_bnb_4bit(const HfFolder& folder, const std::string& weight_name);

// The tensors bitsandbytes writes for `q` under `weight_name`, with its keys, dtypes, shapes and
// order (the weight, then as_dict(packed=True)); the JSON blob has the bytes of Python's
// json.dumps. A bias, if any, is the caller's to add.
std::vector<std::pair<std::string, at::Tensor>> bnb_4bit_tensors(const std::string& weight_name,
                                                                 const ops::Packed4bit& q);

// Python's repr(float(x)) (the shortest string that round-trips, in Python's choice of fixed or
// exponent notation), which json.dumps writes for floats. Non-finite values are an error: JSON
// has no spelling for them that qtrain's reader (or any strict one) accepts.
std::string python_float_repr(double x);

// --- 8-bit ---------------------------------------------------------------------------------

// Whether `weight_name` is stored as int8 (an LLM.int8 weight, CB).
bool is_bnb_int8(const HfFolder& folder, const std::string& weight_name);
// Every int8 weight of the folder, sorted.
std::vector<std::string> bnb_int8_weight_names(const HfFolder& folder);

// CB from `weight_name` and SCB from `<module>.SCB`, where `<module>` is `weight_name` without
// its ".weight". A missing SCB is an error (it cannot be recovered from CB; See Note [SCB is
// never guessed] in ops/quant/int8.cpp); an optional `<module>.weight_format` must be 0 ("row").
ops::Int8Weight read_bnb_int8(const HfFolder& folder, const std::string& weight_name);

// weight (int8 CB), SCB (float32 [out]) and weight_format (uint8 scalar 0), keyed as
// Linear8bitLt's state_dict keys them.
std::vector<std::pair<std::string, at::Tensor>> bnb_int8_tensors(const std::string& weight_name,
                                                                 const ops::Int8Weight& w);

// --- config.json "quantization_config" -----------------------------------------------------

struct BnbQuantization {
  int bits = 4;                                     // 4 (load_in_4bit) or 8 (load_in_8bit)
  ops::QuantType quant_type = ops::QuantType::nf4;  // bnb_4bit_quant_type
  bool double_quant = true;                         // bnb_4bit_use_double_quant
  at::ScalarType compute_dtype = at::kFloat;        // bnb_4bit_compute_dtype
  double llm_int8_threshold = 6.0;
  // Modules left in floating point; nullopt writes null (transformers then keeps lm_head).
  std::optional<std::vector<std::string>> skip_modules;
};

// The "quantization_config" object transformers writes into config.json for `q` (every field of
// BitsAndBytesConfig.to_dict, with bnb_4bit_quant_storage "uint8": the storage qtrain writes).
nlohmann::json bnb_quantization_config(const BnbQuantization& q);
// Reads one back; `where` (e.g. the config.json path) goes into the errors. Rejects anything
// that is not bitsandbytes 4-bit or 8-bit.
BnbQuantization parse_bnb_quantization_config(const nlohmann::json& quantization_config, const std::string& where);
// The quantization a checkpoint was saved with: config.json's quantization_config read as above
// (so GPTQ, AWQ and every other method is refused by name; HfFolder::open calls it), or nullopt
// for a float checkpoint.
std::optional<BnbQuantization> checkpoint_quantization(const nlohmann::json& config_json, const std::string& where);

}  // namespace qtrain::engine::io
