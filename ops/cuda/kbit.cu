// CUDA kernels of the 4-bit blockwise formats (NF4 / FP4); see kbit.h. They write the same bits as
// the CPU code in ops/quant/kbit.cpp, which stays the reference (tests/ops/cuda/kbit_cuda_test.cpp
// compares the two).
#include "ops/cuda/kbit.h"
#include "ops/cuda/check_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace qtrain::ops::cuda {

// Note [Bit-exact CUDA twins]
// The kernels here and in int8.cu must write the bits the CPU code writes, so:
//  - Every rounding step is an explicit IEEE round-to-nearest intrinsic (__fmul_rn, __fdiv_rn,
//    __frcp_rn, __fadd_rn): nvcc never contracts these into FMAs, whatever -fmad says, and
//    __frcp_rn(x) is the correctly rounded 1/x, the same bits as the CPU's 1.0f / x.
//  - The files must not be built with --use_fast_math, -ftz=true or -prec-div=false. -ftz also
//    flushes the operands of the intrinsics and comparisons, and the absmax clamp 1e-38 is itself
//    subnormal (the smallest normal float is 1.18e-38).
//  - A block max is exact whatever the reduction order (max is associative); only which NaN wins
//    may differ, so a NaN absmax can differ from the CPU's in payload bits, never in NaN-ness.
//  - NaN outputs: c10 converts any NaN to bf16 0x7FC0 and to f16 0x7E00 | sign, the device
//    conversions give 0x7FFF; the dequantize kernels convert NaN the way c10 does. A NaN output
//    needs a NaN or infinite absmax, and the float32 NaN that 0 * inf gives is platform-defined
//    (negative on x86, positive on a GPU), so only bf16 NaN outputs are the same bits everywhere.

namespace {

constexpr float kMinAbsmax = 1e-38f;  // bitsandbytes clamps absmax before its reciprocal (kbit.cpp)

int log2_blocksize_4bit(int blocksize, const char* fn) {
  for (int log2 = 5; log2 <= 12; ++log2) {
    if (blocksize == 1 << log2) return log2;
  }
  throw std::invalid_argument(std::string("qtrain::ops::cuda::") + fn + ": blocksize " + std::to_string(blocksize) +
                              " is not a power of two in [32, 4096]");
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

unsigned grid_size(int64_t blocks, const char* fn) {
  if (blocks > INT_MAX) {
    throw std::invalid_argument(std::string("qtrain::ops::cuda::") + fn + ": " + std::to_string(blocks) +
                                " CUDA blocks exceed the grid limit; the tensor is too large");
  }
  return static_cast<unsigned>(blocks);
}

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <typename F>
void dispatch_dtype(Dtype dtype, const char* fn, F&& f) {
  switch (dtype) {
    case Dtype::f32:
      return f(float{});
    case Dtype::f16:
      return f(__half{});
    case Dtype::bf16:
      return f(__nv_bfloat16{});
  }
  throw std::invalid_argument(std::string("qtrain::ops::cuda::") + fn + ": unknown Dtype");
}

// ---- element access ---------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Two 16-bit elements of a little-endian 32-bit word: the lower address (even index) is the low half.
__device__ __forceinline__ float low_half_to_float(uint32_t w, __half) {
  return __half2float(__ushort_as_half(w & 0xFFFFu));
}
__device__ __forceinline__ float high_half_to_float(uint32_t w, __half) {
  return __half2float(__ushort_as_half(w >> 16));
}
__device__ __forceinline__ float low_half_to_float(uint32_t w, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(w & 0xFFFFu));
}
__device__ __forceinline__ float high_half_to_float(uint32_t w, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(w >> 16));
}

// v = p[0..7]; p is 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = low_half_to_float(words[k], T{});
    v[2 * k + 1] = high_half_to_float(words[k], T{});
  }
}

// float32 -> output bits, round to nearest even; kNanAware maps NaN as c10 does (See Note
// [Bit-exact CUDA twins]). Only needed when the block's absmax is not finite.
template <bool kNanAware>
__device__ __forceinline__ uint32_t output_bits(float v, __nv_bfloat16) {
  if (kNanAware && isnan(v)) return 0x7FC0u;
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <bool kNanAware>
__device__ __forceinline__ uint32_t output_bits(float v, __half) {
  if (kNanAware && isnan(v)) return 0x7E00u | ((__float_as_uint(v) >> 16) & 0x8000u);
  return __half_as_ushort(__float2half_rn(v));
}

__device__ __forceinline__ void store_scalar(float* out, int64_t i, float v) {
  out[i] = v;
}
template <typename T>
__device__ __forceinline__ void store_scalar(T* out, int64_t i, float v) {
  reinterpret_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(output_bits<true>(v, T{}));
}

// ---- quantize ---------------------------------------------------------------------------------

// Each thread quantizes a chunk of 8 consecutive elements into 4 packed bytes. A chunk never
// straddles a quantization block (blocksizes are multiples of 32), and blocksize / 8 threads, a
// "group", share one block.
constexpr int kQuantizeChunk = 8;
constexpr int kQuantizeMinThreads = 256;
constexpr int kQuantizeMaxThreads = 4096 / kQuantizeChunk;

struct QuantizeParams {
  float midpoints[15];    // ascending, see codebook.h Quantizer4bit
  uint64_t sorted_codes;  // nibble i (bits 4i..4i+3) = the code of the i-th smallest value
  uint32_t zero_code;     // code of 0.0: the padding nibble of an odd n
};

// Any NaN wins; otherwise the larger value.
__device__ __forceinline__ float nan_max(float a, float b) {
  return (isnan(a) || a > b) ? a : b;
}

// The CPU's code_4bit: sorted index = #{midpoints < v}, exact ties to the lower index; NaN -> 0.
__device__ __forceinline__ uint32_t code_4bit(float v, const QuantizeParams& q) {
  // Mirrors the CPU's clamp; it cannot change the index, every midpoint lies inside (-1, 1).
  v = isnan(v) ? v : fminf(1.0f, fmaxf(-1.0f, v));
  uint32_t idx = 0;
#pragma unroll
  for (int i = 0; i < 15; ++i) idx += q.midpoints[i] < v ? 1u : 0u;
  return static_cast<uint32_t>(q.sorted_codes >> (4 * idx)) & 15u;
}

// Max over the `group` threads (a power of two, 4..512, aligned in the CUDA block) that share a
// quantization block. Every thread of the CUDA block must call it: it may synchronise the block.
__device__ __forceinline__ float group_max(float m, int group) {
  const int width = group < 32 ? group : 32;
  for (int offset = width / 2; offset > 0; offset /= 2) m = nan_max(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
  if (group <= 32) return m;
  __shared__ float warp_max[kQuantizeMaxThreads / 32];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) warp_max[warp] = m;
  __syncthreads();
  const int warps = group / 32;
  const int first = warp / warps * warps;
  m = warp_max[first];
  for (int w = 1; w < warps; ++w) m = nan_max(m, warp_max[first + w]);
  return m;
}

// x: [n], packed: [(n + 1) / 2], absmax: [nblocks]. kVector: x is 16-byte and packed 4-byte aligned.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kQuantizeMaxThreads) quantize_4bit_kernel(const T* __restrict__ x,
                                                                            int64_t n,
                                                                            int log2_blocksize,
                                                                            int64_t nblocks,
                                                                            const __grid_constant__ QuantizeParams q,
                                                                            uint8_t* __restrict__ packed,
                                                                            float* __restrict__ absmax) {
  const int log2_group = log2_blocksize - 3;  // log2(blocksize / kQuantizeChunk)
  const int group = 1 << log2_group;
  const int lane = static_cast<int>(threadIdx.x) & (group - 1);
  const int64_t block = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> log2_group) + (threadIdx.x >> log2_group);
  const int64_t start = (block << log2_blocksize) + static_cast<int64_t>(lane) * kQuantizeChunk;

  // Missing elements (past n) load as 0, which cannot change a max of |x|.
  float v[kQuantizeChunk];
  if (kVector && start + kQuantizeChunk <= n) {
    load8(x + start, v);
  } else {
#pragma unroll
    for (int i = 0; i < kQuantizeChunk; ++i) v[i] = start + i < n ? to_float(x[start + i]) : 0.0f;
  }
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kQuantizeChunk; ++i) m = nan_max(fabsf(v[i]), m);
  const float amax = group_max(m, group);
  if (start >= n) return;

  // See Note [Where bitsandbytes' CPU and CUDA quantizers differ] in ops/quant/kbit.cpp: full
  // blocks multiply by the reciprocal of the clamped absmax; the partial last block divides by it
  // and stores the clamped value.
  const bool partial_last = block == nblocks - 1 && (n & ((int64_t{1} << log2_blocksize) - 1)) != 0;
  const float clamped = isnan(amax) ? amax : fmaxf(amax, kMinAbsmax);
  uint32_t codes[kQuantizeChunk];
  if (partial_last) {
#pragma unroll
    for (int i = 0; i < kQuantizeChunk; ++i) codes[i] = code_4bit(__fdiv_rn(v[i], clamped), q);
  } else {
    const float inv = __frcp_rn(clamped);
#pragma unroll
    for (int i = 0; i < kQuantizeChunk; ++i) codes[i] = code_4bit(__fmul_rn(v[i], inv), q);
  }
#pragma unroll
  for (int i = 0; i < kQuantizeChunk; ++i) {
    if (start + i >= n) codes[i] = q.zero_code;
  }
  if (lane == 0) absmax[block] = partial_last ? clamped : amax;

  // Byte j of the chunk holds elements 2j (HIGH nibble) and 2j + 1 (low nibble); little-endian,
  // so byte j is bits 8j..8j+7 of the word.
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < kQuantizeChunk / 2; ++j) word |= (codes[2 * j] << 4 | codes[2 * j + 1]) << (8 * j);
  const int64_t byte0 = start / 2;
  const int64_t nbytes = (n + 1) / 2;
  if (kVector && byte0 + 4 <= nbytes) {
    *reinterpret_cast<uint32_t*>(packed + byte0) = word;
  } else {
    for (int j = 0; j < 4 && byte0 + j < nbytes; ++j) packed[byte0 + j] = static_cast<uint8_t>(word >> (8 * j));
  }
}

// ---- dequantize -------------------------------------------------------------------------------

// An "item" is the values one thread turns into one 16-byte store: 4 float32 from 2 packed
// bytes, or 8 bf16/f16 from 4. Consecutive threads take consecutive items, so both the loads and
// the stores of a warp are contiguous; each thread handles kDequantizeUnroll items, a block's
// width apart, and issues all their loads before the first store. The 16-entry code table lives
// in shared memory: 16 floats sit in 16 distinct banks, so any pattern of nibbles reads it
// without bank conflicts.
constexpr int kDequantizeThreads = 256;
constexpr int kDequantizeUnroll = 4;

template <typename T>
struct Item {
  static constexpr int kValues = 8;
  using Packed = uint32_t;
};
template <>
struct Item<float> {
  static constexpr int kValues = 4;
  using Packed = uint16_t;
};

__device__ __forceinline__ uint16_t load_packed(const uint16_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ uint32_t load_packed(const uint32_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

// out[0..kValues) = p, one 16-byte store.
template <bool kNanAware>
__device__ __forceinline__ void store_item(float* out, const float (&p)[4]) {
  *reinterpret_cast<float4*>(out) = make_float4(p[0], p[1], p[2], p[3]);
}
template <bool kNanAware, typename T>
__device__ __forceinline__ void store_item(T* out, const float (&p)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = output_bits<kNanAware>(p[2 * k], T{}) | output_bits<kNanAware>(p[2 * k + 1], T{}) << 16;
  *reinterpret_cast<uint4*>(out) = make_uint4(w[0], w[1], w[2], w[3]);
}

// One float32 multiply per value, then one rounding to T: the CPU's (and bitsandbytes') arithmetic.
template <typename T>
__device__ __forceinline__ void decode_item(typename Item<T>::Packed w, float scale, const float* lut, T* out) {
  constexpr int kValues = Item<T>::kValues;
  float p[kValues];
#pragma unroll
  for (int j = 0; j < kValues / 2; ++j) {
    p[2 * j] = __fmul_rn(lut[(w >> (8 * j + 4)) & 15u], scale);  // high nibble: even index
    p[2 * j + 1] = __fmul_rn(lut[(w >> (8 * j)) & 15u], scale);
  }
  if (isfinite(scale)) {
    store_item<false>(out, p);
  } else {
    store_item<true>(out, p);
  }
}

__device__ __forceinline__ uint32_t nibble(const uint8_t* packed, int64_t i) {
  const uint32_t byte = packed[i / 2];
  return i % 2 == 0 ? byte >> 4 : byte & 15u;
}

// packed: [(n + 1) / 2], absmax: [ceil(n / blocksize)], out: [n]. packed is aligned to
// sizeof(Item<T>::Packed), out to 16 bytes. The thread whose item index is n / kValues also
// writes the last n % kValues elements, one by one.
template <typename T>
__global__ void __launch_bounds__(kDequantizeThreads)
    dequantize_4bit_kernel(const uint8_t* __restrict__ packed,
                           const float* __restrict__ absmax,
                           int64_t n,
                           int log2_blocksize,
                           const __grid_constant__ Codebook4bitTable codebook,
                           T* __restrict__ out) {
  using Packed = typename Item<T>::Packed;
  constexpr int kValues = Item<T>::kValues;
  __shared__ float lut[16];
  if (threadIdx.x < 16) lut[threadIdx.x] = codebook.values[threadIdx.x];
  __syncthreads();

  const int64_t items = n / kValues;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (kDequantizeThreads * kDequantizeUnroll) + threadIdx.x;
  Packed w[kDequantizeUnroll];
  float scale[kDequantizeUnroll];
#pragma unroll
  for (int k = 0; k < kDequantizeUnroll; ++k) {
    const int64_t item = first + k * kDequantizeThreads;
    if (item < items) {
      w[k] = load_packed(reinterpret_cast<const Packed*>(packed) + item);
      scale[k] = __ldg(absmax + ((item * kValues) >> log2_blocksize));
    }
  }
#pragma unroll
  for (int k = 0; k < kDequantizeUnroll; ++k) {
    const int64_t item = first + k * kDequantizeThreads;
    if (item < items) decode_item(w[k], scale[k], lut, out + item * kValues);
  }
  const int64_t tail_item = items - first;  // the thread that would take item `items` writes the tail
  if (tail_item >= 0 && tail_item < kDequantizeThreads * kDequantizeUnroll && tail_item % kDequantizeThreads == 0) {
    for (int64_t i = items * kValues; i < n; ++i) {
      store_scalar(out, i, __fmul_rn(lut[nibble(packed, i)], __ldg(absmax + (i >> log2_blocksize))));
    }
  }
}

// The same arithmetic one element per thread, for buffers the vector kernel cannot address
// (views at odd offsets).
template <typename T>
__global__ void __launch_bounds__(kDequantizeThreads)
    dequantize_4bit_scalar_kernel(const uint8_t* __restrict__ packed,
                                  const float* __restrict__ absmax,
                                  int64_t n,
                                  int log2_blocksize,
                                  const __grid_constant__ Codebook4bitTable codebook,
                                  T* __restrict__ out) {
  __shared__ float lut[16];
  if (threadIdx.x < 16) lut[threadIdx.x] = codebook.values[threadIdx.x];
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    store_scalar(out, i, __fmul_rn(lut[nibble(packed, i)], __ldg(absmax + (i >> log2_blocksize))));
  }
}

// ---- nested absmax ----------------------------------------------------------------------------

// qabsmax: [n], absmax2: [ceil(n / blocksize)], code: [256], out: [n]. One vector per tensor, one
// float per quantization block: small, so plain scalar code.
__global__ void dequantize_nested_absmax_kernel(const uint8_t* __restrict__ qabsmax,
                                                const float* __restrict__ absmax2,
                                                const float* __restrict__ code,
                                                float offset,
                                                int64_t n,
                                                int64_t blocksize,
                                                float* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // Two roundings, as bitsandbytes' 8-bit dequantize followed by a separate add.
    out[i] = __fadd_rn(__fmul_rn(__ldg(code + qabsmax[i]), __ldg(absmax2 + i / blocksize)), offset);
  }
}

constexpr int64_t kMaxScalarGrid = int64_t{1} << 20;  // grid-stride beyond this

}  // namespace

void quantize_4bit(const void* x,
                   Dtype dtype,
                   int64_t n,
                   int blocksize,
                   const Quantizer4bitTable& quantizer,
                   uint8_t* packed,
                   float* absmax,
                   cudaStream_t stream) {
  const int log2_blocksize = log2_blocksize_4bit(blocksize, "quantize_4bit");
  if (n < 0) throw std::invalid_argument("qtrain::ops::cuda::quantize_4bit: negative n " + std::to_string(n));
  if (n == 0) return;

  QuantizeParams params{};
  int zero_index = 0;  // the CPU's code_4bit(0.0f): #{midpoints < 0}
  for (int i = 0; i < 15; ++i) {
    params.midpoints[i] = quantizer.midpoints[i];
    zero_index += quantizer.midpoints[i] < 0.0f;
  }
  for (int i = 0; i < 16; ++i) {
    if (quantizer.sorted_codes[i] > 15) {
      throw std::invalid_argument("qtrain::ops::cuda::quantize_4bit: sorted code " +
                                  std::to_string(quantizer.sorted_codes[i]) + " is not a 4-bit code");
    }
    params.sorted_codes |= static_cast<uint64_t>(quantizer.sorted_codes[i]) << (4 * i);
  }
  params.zero_code = quantizer.sorted_codes[zero_index];

  const int group = blocksize / kQuantizeChunk;
  const int threads = std::max(group, kQuantizeMinThreads);
  const int64_t nblocks = ceil_div(n, blocksize);
  const unsigned grid = grid_size(ceil_div(nblocks, threads / group), "quantize_4bit");
  const bool vector = aligned(x, 16) && aligned(packed, 4);
  dispatch_dtype(dtype, "quantize_4bit", [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    if (vector) {
      quantize_4bit_kernel<T, true>
          <<<grid, threads, 0, stream>>>(xt, n, log2_blocksize, nblocks, params, packed, absmax);
    } else {
      quantize_4bit_kernel<T, false>
          <<<grid, threads, 0, stream>>>(xt, n, log2_blocksize, nblocks, params, packed, absmax);
    }
  });
  check_launch("quantize_4bit_kernel");
}

void dequantize_4bit(const uint8_t* packed,
                     const float* absmax,
                     int64_t n,
                     int blocksize,
                     const Codebook4bitTable& codebook,
                     void* out,
                     Dtype dtype,
                     cudaStream_t stream) {
  const int log2_blocksize = log2_blocksize_4bit(blocksize, "dequantize_4bit");
  if (n < 0) throw std::invalid_argument("qtrain::ops::cuda::dequantize_4bit: negative n " + std::to_string(n));
  if (n == 0) return;
  dispatch_dtype(dtype, "dequantize_4bit", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    if (aligned(packed, sizeof(typename Item<T>::Packed)) && aligned(out, 16)) {
      // Blocks cover items 0..n / kValues inclusive: the last one also writes the tail.
      constexpr int64_t tile = int64_t{kDequantizeThreads} * kDequantizeUnroll;
      const unsigned grid = grid_size(n / Item<T>::kValues / tile + 1, "dequantize_4bit");
      dequantize_4bit_kernel<T>
          <<<grid, kDequantizeThreads, 0, stream>>>(packed, absmax, n, log2_blocksize, codebook, o);
      check_launch("dequantize_4bit_kernel");
    } else {
      const auto grid = static_cast<unsigned>(std::min(ceil_div(n, kDequantizeThreads), kMaxScalarGrid));
      dequantize_4bit_scalar_kernel<T>
          <<<grid, kDequantizeThreads, 0, stream>>>(packed, absmax, n, log2_blocksize, codebook, o);
      check_launch("dequantize_4bit_scalar_kernel");
    }
  });
}

void dequantize_nested_absmax(const uint8_t* qabsmax,
                              const float* absmax2,
                              const float* code,
                              float offset,
                              int64_t n,
                              int64_t blocksize,
                              float* out,
                              cudaStream_t stream) {
  if (n < 0 || blocksize <= 0) {
    throw std::invalid_argument("qtrain::ops::cuda::dequantize_nested_absmax: bad n " + std::to_string(n) +
                                " or blocksize " + std::to_string(blocksize));
  }
  if (n == 0) return;
  constexpr int threads = 256;
  const auto grid = static_cast<unsigned>(std::min(ceil_div(n, threads), kMaxScalarGrid));
  dequantize_nested_absmax_kernel<<<grid, threads, 0, stream>>>(qabsmax, absmax2, code, offset, n, blocksize, out);
  check_launch("dequantize_nested_absmax_kernel");
}

}  // namespace qtrain::ops::cuda
