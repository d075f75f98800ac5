// CUDA kernels of LLM.int8() row-wise quantization; see int8.h. They write the same bits as the
// CPU code in ops/quant/int8.cpp, which stays the reference (tests/ops/cuda/int8_cuda_test.cpp
// compares the two). See Note [Bit-exact CUDA twins] in kbit.cu for the arithmetic rules.
#include "ops/cuda/int8.h"
#include "ops/cuda/check_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace qtrain::ops::cuda {
namespace {

constexpr float kInv127 = 1.0f / 127.0f;  // the CPU's constant: bitsandbytes' 7.874015718698502e-3 as float32
constexpr int kMaxThreads = 256;          // per row

void check_shape(int64_t rows, int64_t cols, const char* fn) {
  if (rows < 0 || cols < 0 || rows > INT_MAX) {
    throw std::invalid_argument(std::string("qtrain::ops::cuda::") + fn + ": unsupported shape [" +
                                std::to_string(rows) + ", " + std::to_string(cols) + "] (one CUDA block per row, " +
                                "at most 2^31 - 1 rows)");
  }
}

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Threads for a row of `work` units (vectors or elements): whole warps, at most kMaxThreads.
int threads_for(int64_t work) {
  return static_cast<int>(std::clamp<int64_t>((work + 31) / 32 * 32, 32, kMaxThreads));
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

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// 16-bit element bits -> float32, exact.
__device__ __forceinline__ float bits_to_float(uint32_t bits, __half) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ float bits_to_float(uint32_t bits, __nv_bfloat16) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}

// 16 bytes of elements: 4 float32 or 8 bf16/f16.
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// v = p[0..kVec<T>); p is 16-byte aligned.
__device__ __forceinline__ void load_vec(const float* p, float (&v)[4]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[8]) {
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    // Little-endian: the even element is the low half of the word.
    v[2 * k] = bits_to_float(words[k] & 0xFFFFu, T{});
    v[2 * k + 1] = bits_to_float(words[k] >> 16, T{});
  }
}

// One step of the CPU's row max: outliers are skipped, and fmaxf, like std::max(amax, v), ignores
// a NaN v.
__device__ __forceinline__ float absmax_step(float m, float v, float threshold) {
  const float a = fabsf(v);
  return threshold > 0.0f && a >= threshold ? m : fmaxf(m, a);
}

// Max over the CUDA block (whole warps); every thread must call it.
__device__ __forceinline__ float block_max(float m) {
  __shared__ float warp_max[kMaxThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  m = warp_max[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) m = fmaxf(m, warp_max[w]);
  return m;
}

// The CPU's int8 code of v: 0 for outliers and zero rows, else round half to even of v * scale.
__device__ __forceinline__ uint32_t quantize_one(float v, float amax, float scale, float threshold) {
  if (amax == 0.0f || (threshold > 0.0f && fabsf(v) >= threshold)) return 0;
  return static_cast<uint8_t>(static_cast<int8_t>(__float2int_rn(__fmul_rn(v, scale))));
}

// One CUDA block per row. a: [rows, cols], q: [rows, cols], row_absmax: [rows]. kVector: cols is
// a multiple of kVec<T>, a is 16-byte and q kVec<T>-byte aligned. The second pass re-reads the row,
// mostly from L1/L2.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kMaxThreads) int8_quant_rows_kernel(
    const T* __restrict__ a, int64_t cols, float threshold, int8_t* __restrict__ q, float* __restrict__ row_absmax) {
  constexpr int V = kVec<T>;
  const int64_t r = blockIdx.x;
  const T* in = a + r * cols;
  int8_t* out = q + r * cols;

  float m = 0.0f;
  if constexpr (kVector) {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += static_cast<int64_t>(blockDim.x) * V) {
      float v[V];
      load_vec(in + c, v);
#pragma unroll
      for (int i = 0; i < V; ++i) m = absmax_step(m, v[i], threshold);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = absmax_step(m, to_float(in[c]), threshold);
  }
  const float amax = block_max(m);
  if (threadIdx.x == 0) row_absmax[r] = amax;
  // bitsandbytes: reciprocal(absmax) * 127, in float32.
  const float scale = amax == 0.0f ? 0.0f : __fmul_rn(__frcp_rn(amax), 127.0f);

  if constexpr (kVector) {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += static_cast<int64_t>(blockDim.x) * V) {
      float v[V];
      load_vec(in + c, v);
      uint32_t w[V / 4] = {};
#pragma unroll
      for (int i = 0; i < V; ++i) w[i / 4] |= quantize_one(v[i], amax, scale, threshold) << (8 * (i % 4));
      if constexpr (V == 4) {
        *reinterpret_cast<uint32_t*>(out + c) = w[0];
      } else {
        *reinterpret_cast<uint2*>(out + c) = make_uint2(w[0], w[1]);
      }
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      out[c] = static_cast<int8_t>(quantize_one(to_float(in[c]), amax, scale, threshold));
    }
  }
}

// The CPU's (q * absmax) * (1/127): two float32 roundings, never fused.
__device__ __forceinline__ float dequantize_one(int8_t q, float absmax) {
  return __fmul_rn(__fmul_rn(static_cast<float>(q), absmax), kInv127);
}

// One CUDA block per row. q: [rows, cols], row_absmax: [rows], out: [rows, cols]. kVector: cols
// is a multiple of 4, q is 4-byte and out 16-byte aligned.
template <bool kVector>
__global__ void __launch_bounds__(kMaxThreads) int8_dequant_rows_kernel(const int8_t* __restrict__ q,
                                                                        const float* __restrict__ row_absmax,
                                                                        int64_t cols,
                                                                        float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const float s = __ldg(row_absmax + r);
  const int8_t* in = q + r * cols;
  float* o = out + r * cols;
  if constexpr (kVector) {
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * 4; c < cols; c += static_cast<int64_t>(blockDim.x) * 4) {
      const char4 v = __ldg(reinterpret_cast<const char4*>(in + c));
      *reinterpret_cast<float4*>(o + c) =
          make_float4(dequantize_one(v.x, s), dequantize_one(v.y, s), dequantize_one(v.z, s), dequantize_one(v.w, s));
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = dequantize_one(in[c], s);
  }
}

}  // namespace

void int8_vectorwise_quant(const void* a,
                           Dtype dtype,
                           int64_t rows,
                           int64_t cols,
                           float threshold,
                           int8_t* q,
                           float* row_absmax,
                           cudaStream_t stream) {
  check_shape(rows, cols, "int8_vectorwise_quant");
  if (rows == 0) return;
  dispatch_dtype(dtype, "int8_vectorwise_quant", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec<T>;
    const T* at = static_cast<const T*>(a);
    const auto grid = static_cast<unsigned>(rows);
    if (cols % V == 0 && aligned(a, 16) && aligned(q, V)) {
      int8_quant_rows_kernel<T, true><<<grid, threads_for(cols / V), 0, stream>>>(at, cols, threshold, q, row_absmax);
    } else {
      int8_quant_rows_kernel<T, false><<<grid, threads_for(cols), 0, stream>>>(at, cols, threshold, q, row_absmax);
    }
  });
  check_launch("int8_quant_rows_kernel");
}

void int8_vectorwise_dequant(
    const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  check_shape(rows, cols, "int8_vectorwise_dequant");
  if (rows == 0 || cols == 0) return;
  const auto grid = static_cast<unsigned>(rows);
  if (cols % 4 == 0 && aligned(q, 4) && aligned(out, 16)) {
    int8_dequant_rows_kernel<true><<<grid, threads_for(cols / 4), 0, stream>>>(q, row_absmax, cols, out);
  } else {
    int8_dequant_rows_kernel<false><<<grid, threads_for(cols), 0, stream>>>(q, row_absmax, cols, out);
  }
  check_launch("int8_dequant_rows_kernel");
}

}  // namespace qtrain::ops::cuda
