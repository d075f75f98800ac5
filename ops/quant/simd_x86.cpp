// AVX2 dequantization loops; see simd_x86.h.
#include "ops/quant/simd_x86.h"

#include <immintrin.h>

namespace qtrain::ops::simd {
namespace {

// float -> bfloat16 bits, round to nearest even, NaN -> 0x7fc0 (c10::BFloat16's rule).
inline __m128i to_bf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i r = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
  // Pack the low 16 bits of the 8 lanes: packus works per 128-bit lane, so fix the order after.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0b1000));
}

inline void store8(__m256 v, void* out, int64_t i, OutType type) {
  switch (type) {
    case OutType::f32:
      _mm256_storeu_ps(static_cast<float*>(out) + i, v);
      break;
    case OutType::bf16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i), to_bf16(v));
      break;
    case OutType::f16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i),
                       _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      break;
  }
}

// 16-entry table lookup of 8 codes: permute in each half of the table, pick by bit 3.
inline __m256 lookup(__m256i codes, __m256 lo, __m256 hi) {
  const __m256 a = _mm256_permutevar8x32_ps(lo, codes);
  const __m256 b = _mm256_permutevar8x32_ps(hi, codes);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
}

}  // namespace

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}

namespace {

// 16 codes of `bytes` (8 packed bytes) -> out[i .. i+16), scaled by s.
inline void dequant16(const uint8_t* bytes8, __m256 lo, __m256 hi, __m256 s, void* out, int64_t i, OutType type) {
  const __m128i nibble = _mm_set1_epi8(0x0f);
  // 8 bytes -> 16 codes in element order: high nibble (even index) first.
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes8));
  const __m128i codes =
      _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), nibble), _mm_and_si128(bytes, nibble));
  // One float32 multiply per element, as bitsandbytes does.
  store8(_mm256_mul_ps(lookup(_mm256_cvtepu8_epi32(codes), lo, hi), s), out, i, type);
  store8(_mm256_mul_ps(lookup(_mm256_cvtepu8_epi32(_mm_srli_si128(codes, 8)), lo, hi), s), out, i + 8, type);
}

}  // namespace

void dequant_4bit_run(const uint8_t* packed, int64_t count, const float* lut16, float scale, void* out, OutType type) {
  const __m256 lo = _mm256_loadu_ps(lut16);
  const __m256 hi = _mm256_loadu_ps(lut16 + 8);
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < count; i += 16) dequant16(packed + i / 2, lo, hi, s, out, i, type);
}

void dequant_4bit_blocks(const uint8_t* packed,
                         const float* absmax,
                         int64_t blocks,
                         int64_t blocksize,
                         const float* lut16,
                         void* out,
                         OutType type) {
  const __m256 lo = _mm256_loadu_ps(lut16);
  const __m256 hi = _mm256_loadu_ps(lut16 + 8);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256 s = _mm256_set1_ps(absmax[b]);
    const int64_t start = b * blocksize;
    for (int64_t i = start; i < start + blocksize; i += 16) dequant16(packed + i / 2, lo, hi, s, out, i, type);
  }
}

void dequant_int8_run(const int8_t* q, int64_t count, float scale, void* out, OutType type) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    store8(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s), out, i, type);
  }
  for (; i < count; ++i) {
    const float v = static_cast<float>(q[i]) * scale;
    switch (type) {
      case OutType::f32:
        static_cast<float*>(out)[i] = v;
        break;
      case OutType::bf16:
        _mm_storeu_si16(static_cast<uint16_t*>(out) + i, to_bf16(_mm256_set1_ps(v)));
        break;
      case OutType::f16:
        _mm_storeu_si16(static_cast<uint16_t*>(out) + i, _mm256_cvtps_ph(_mm256_set1_ps(v), _MM_FROUND_TO_NEAREST_INT));
        break;
    }
  }
}

}  // namespace qtrain::ops::simd
