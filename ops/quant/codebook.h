// The code tables of bitsandbytes' k-bit formats: the 4-bit NF4/FP4 dequantization tables, the
// 8-bit signed dynamic map used for double quantization of absmax and for the first moment of
// 8-bit optimizers, and the unsigned dynamic map of their second moment. The values are the
// canonical float32 literals of bitsandbytes (functional.py's get_4bit_type and
// create_dynamic_map), not regenerated: regeneration differs by an ulp across torch versions.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace qtrain::ops {

enum class QuantType : uint8_t { nf4, fp4 };

std::string_view quant_type_name(QuantType type);
// Accepts "nf4" / "fp4"; anything else is an error that names the accepted values.
QuantType quant_type_from_name(std::string_view name);

// Dequantization value of each 4-bit code (bitsandbytes' `quant_map`). FP4 entry 8 is +0.0,
// as in the tensor bitsandbytes stores.
const std::array<float, 16>& codebook_4bit(QuantType type);

// The values dequantization multiplies by absmax: codebook_4bit, except that FP4 code 8 decodes
// to -0.0, as in bitsandbytes' CPU and CUDA dequantization kernels.
const std::array<float, 16>& dequant_lut_4bit(QuantType type);

// The 4-bit quantizer of bitsandbytes' CPU backend (the PyTorch "default" kernel): the codes
// sorted by value, and the float32 midpoints between neighbours. A scaled value x in [-1, 1]
// gets sorted index #{i : midpoints[i] < x} (exact ties go to the lower index), and code
// `sorted_codes[index]`. For NF4 the order is the identity. For FP4 the two zeros sort as
// code 0 then code 8, as torch.argsort orders them in bitsandbytes 0.50.
struct Quantizer4bit {
  std::array<uint8_t, 16> sorted_codes;
  std::array<float, 15> midpoints;
};
const Quantizer4bit& quantizer_4bit(QuantType type);

// bitsandbytes `create_dynamic_map(signed=True)`: 256 sorted float32 values in [-0.993, 1].
// It is the code of the nested (double-quantized) absmax, stored as `nested_quant_map`.
const std::array<float, 256>& dynamic_map_signed();
// bitsandbytes `create_dynamic_map(signed=False)`: 256 sorted float32 values in [0, 1], 0 first.
// The code of the second moment (exp_avg_sq) of 8-bit optimizers, `qmap2`.
const std::array<float, 256>& dynamic_map_unsigned();

}  // namespace qtrain::ops
