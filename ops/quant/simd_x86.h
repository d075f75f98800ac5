// AVX2 inner loops of the CPU dequantizers. This translation unit is compiled with
// -mavx2 -mf16c and includes no torch header (an inline torch function compiled for AVX2 could
// otherwise be picked by the linker for every caller); callers check cpu_has_avx2() first and
// keep the scalar loop as the reference (tests compare the two).
#pragma once

#include <cstdint>

namespace qtrain::ops::simd {

enum class OutType : uint8_t { f32, bf16, f16 };

// Whether this CPU runs the AVX2 + F16C loops below.
bool cpu_has_avx2();

// out[i] = lut[code(i)] * scale, i in [0, count): `count` codes from `packed` (two per byte, high
// nibble first), all in one quantization block. count must be a multiple of 16. out is float,
// bf16 bits or fp16 bits, rounded to nearest even.
void dequant_4bit_run(const uint8_t* packed, int64_t count, const float* lut16, float scale, void* out, OutType type);

// The same for `blocks` consecutive full blocks of `blocksize` codes (a multiple of 16), block b
// scaled by absmax[b]: one call for a whole run of blocks keeps the tables in registers.
void dequant_4bit_blocks(const uint8_t* packed,
                         const float* absmax,
                         int64_t blocks,
                         int64_t blocksize,
                         const float* lut16,
                         void* out,
                         OutType type);

// out[c] = float(q[c]) * scale, c in [0, count), rounded to the output type.
void dequant_int8_run(const int8_t* q, int64_t count, float scale, void* out, OutType type);

}  // namespace qtrain::ops::simd
