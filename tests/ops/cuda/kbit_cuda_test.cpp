// The CUDA 4-bit kernels (ops/cuda/kbit.cu) against the CPU reference (ops/quant/kbit.cpp), bit
// for bit: packed codes, absmax, double-quantized absmax and its reconstruction, dequantized
// values, over nf4/fp4 x blocksizes x dtypes x sizes (odd n, partial last blocks, a large n), and
// the edge cases: exact ties on midpoints, all-zero blocks, subnormal and non-finite input,
// buffers at odd offsets. Each test skips itself where no CUDA device is present.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include "ops/quant/codebook.h"
#include "ops/quant/kbit.h"

namespace qtrain::ops {
namespace {

const std::vector<QuantType> kTypes = {QuantType::nf4, QuantType::fp4};
const std::vector<int64_t> kBlocksizes = {32, 64, 128, 256, 4096};
const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf};
// Odd n, n below / around / above a blocksize, and n that is no multiple of 4 or 8 (the vector
// widths of the kernels).
const std::vector<int64_t> kSizes = {1, 2, 3, 7, 8, 9, 31, 32, 33, 63, 65, 255, 257, 1000, 4095, 4097, 12345, 65549};
constexpr int64_t kLargeN = 4096 * 1024 + 7;

std::string describe(QuantType type, int64_t blocksize, at::ScalarType dtype, int64_t n) {
  std::ostringstream s;
  s << quant_type_name(type) << " blocksize " << blocksize << " " << dtype << " n " << n;
  return s.str();
}

// The same bytes, as integers of the element's width: comparing these compares bit patterns,
// so -0.0 differs from 0.0 and NaNs compare by payload.
at::Tensor as_bits(const at::Tensor& t) {
  auto c = t.contiguous().cpu().reshape({-1});
  switch (c.element_size()) {
    case 4:
      return c.view(at::kInt);
    case 2:
      return c.view(at::kShort);
    default:
      return c.view(at::kByte);
  }
}

// Bitwise equality; on failure names how many elements differ and the first one. With
// `nan_equal`, a NaN matches any NaN (NaN payloads and signs are platform-defined, See Note
// [Bit-exact CUDA twins] in ops/cuda/kbit.cu).
testing::AssertionResult bits_equal(const at::Tensor& expected, const at::Tensor& actual, bool nan_equal = false) {
  if (expected.scalar_type() != actual.scalar_type() || !expected.sizes().equals(actual.sizes())) {
    return testing::AssertionFailure() << "expected " << expected.scalar_type() << " " << expected.sizes() << ", got "
                                       << actual.scalar_type() << " " << actual.sizes();
  }
  auto differ = as_bits(expected) != as_bits(actual);
  if (nan_equal && at::isFloatingType(expected.scalar_type())) {
    const auto e = expected.cpu().reshape({-1}), a = actual.cpu().reshape({-1});
    if (!at::equal(e.isnan(), a.isnan())) return testing::AssertionFailure() << "NaNs at different places";
    differ &= e.isnan().logical_not();
  }
  const auto where = differ.nonzero();
  if (where.size(0) == 0) return testing::AssertionSuccess();
  const int64_t i = where[0][0].item<int64_t>();
  return testing::AssertionFailure() << where.size(0) << " of " << differ.numel() << " elements differ; first at " << i
                                     << ": expected " << expected.cpu().reshape({-1})[i].item<double>() << " (bits "
                                     << as_bits(expected)[i].item<int64_t>() << "), got "
                                     << actual.cpu().reshape({-1})[i].item<double>() << " (bits "
                                     << as_bits(actual)[i].item<int64_t>() << ")";
}

// Normal values whose scale changes every 100 elements, so blocks get different absmax; seeded.
at::Tensor random_input(int64_t n, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto x = at::randn({n}, gen);
  const auto scale = at::exp(at::randn({(n + 99) / 100}, gen) * 2.0).repeat_interleave(100).narrow(0, 0, n);
  return (x * scale).to(dtype);
}

Packed4bit to_device(const Packed4bit& q, const at::Device& device) {
  Packed4bit r = q;
  r.packed = q.packed.to(device);
  if (q.absmax.defined()) r.absmax = q.absmax.to(device);
  if (q.nested) {
    r.nested->qabsmax = q.nested->qabsmax.to(device);
    r.nested->absmax2 = q.nested->absmax2.to(device);
    r.nested->code = q.nested->code.to(device);
  }
  return r;
}

// Quantizes x on the CPU and on the GPU and expects the same bytes; then dequantizes both into
// each dtype in `out_dtypes` and expects the same bits.
void expect_same_as_cpu(const at::Tensor& x,
                        QuantType type,
                        int64_t blocksize,
                        bool double_quant,
                        const std::vector<at::ScalarType>& out_dtypes,
                        const std::string& what,
                        bool nan_equal = false) {
  SCOPED_TRACE(what + (double_quant ? " double quant" : ""));
  const Packed4bit cpu = quantize_4bit(x, type, blocksize, double_quant);
  const Packed4bit gpu = quantize_4bit(x.cuda(), type, blocksize, double_quant);
  ASSERT_TRUE(gpu.packed.is_cuda());
  ASSERT_TRUE(bits_equal(cpu.packed, gpu.packed)) << "packed codes";
  if (double_quant) {
    ASSERT_TRUE(gpu.nested.has_value());
    EXPECT_TRUE(bits_equal(cpu.nested->qabsmax, gpu.nested->qabsmax)) << "nested codes";
    EXPECT_TRUE(bits_equal(cpu.nested->absmax2, gpu.nested->absmax2, nan_equal)) << "nested absmax";
    EXPECT_EQ(0, std::memcmp(&cpu.nested->offset, &gpu.nested->offset, sizeof(float))) << "offset";
    // The GPU reconstructs it with dequantize_nested_absmax_kernel, the CPU with torch ops.
    EXPECT_TRUE(bits_equal(absmax_float(cpu), absmax_float(gpu), nan_equal)) << "reconstructed absmax";
  } else {
    EXPECT_TRUE(bits_equal(cpu.absmax, gpu.absmax, nan_equal)) << "absmax";
  }
  for (const auto dtype : out_dtypes) {
    const auto expected = dequantize_4bit(cpu, dtype);
    const auto actual = dequantize_4bit(gpu, dtype);
    ASSERT_TRUE(actual.is_cuda());
    EXPECT_TRUE(bits_equal(expected, actual, nan_equal)) << "dequantized to " << dtype;
  }
}

TEST(KbitCuda, QuantizeAndDequantizeMatchCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 1;
  for (const auto type : kTypes) {
    for (const auto blocksize : kBlocksizes) {
      for (const auto dtype : kDtypes) {
        for (const auto n : kSizes) {
          expect_same_as_cpu(
              random_input(n, dtype, seed++), type, blocksize, false, kDtypes, describe(type, blocksize, dtype, n));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(KbitCuda, LargeTensorMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 100;
  for (const auto type : kTypes) {
    for (const int64_t blocksize : {64, 4096}) {
      for (const auto dtype : kDtypes) {
        expect_same_as_cpu(random_input(kLargeN, dtype, seed++),
                           type,
                           blocksize,
                           false,
                           {dtype},
                           describe(type, blocksize, dtype, kLargeN));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(KbitCuda, DoubleQuantMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 200;
  // 1000: one nested block; 64 * 256 * 3 + 17 at blocksize 64: 4 nested blocks, the last partial.
  for (const auto type : kTypes) {
    for (const int64_t blocksize : {32, 64, 256}) {
      for (const auto dtype : kDtypes) {
        for (const int64_t n : {int64_t{1000}, int64_t{64 * 256 * 3 + 17}}) {
          expect_same_as_cpu(
              random_input(n, dtype, seed++), type, blocksize, true, kDtypes, describe(type, blocksize, dtype, n));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  expect_same_as_cpu(random_input(kLargeN, at::kBFloat16, seed++),
                     QuantType::nf4,
                     64,
                     true,
                     {at::kBFloat16},
                     describe(QuantType::nf4, 64, at::kBFloat16, kLargeN));
}

// Blocks whose scaled values land exactly on the quantizer's midpoints (ties go to the lower
// code) and on the codes themselves, with absmax 1 and 2 (exact scaling) and 3 (inexact); zero
// blocks, including a zero partial last block (stored as the code of 0.0, not as code 0).
TEST(KbitCuda, TiesAndZeroBlocksMatchCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  for (const auto type : kTypes) {
    const Quantizer4bit& q = quantizer_4bit(type);
    const auto& code = codebook_4bit(type);
    std::vector<float> block;
    for (float scale : {1.0f, 2.0f, 3.0f}) {
      std::vector<float> b = {scale, -scale};
      for (float m : q.midpoints) b.push_back(m * scale), b.push_back(-m * scale);
      for (float c : code) b.push_back(c * scale);
      b.resize(64, 0.0f);
      block.insert(block.end(), b.begin(), b.end());
    }
    block.insert(block.end(), 64, 0.0f);                           // an all-zero block
    block.insert(block.end(), block.begin(), block.begin() + 40);  // a partial last block
    for (const auto dtype : kDtypes) {
      for (const int64_t blocksize : {32, 64}) {
        const auto x = at::tensor(block).to(dtype);
        expect_same_as_cpu(x, type, blocksize, false, kDtypes, describe(type, blocksize, dtype, x.numel()) + " ties");
        expect_same_as_cpu(at::zeros({4099}, dtype),
                           type,
                           blocksize,
                           false,
                           kDtypes,
                           describe(type, blocksize, dtype, 4099) + " zeros");
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Subnormal values and absmax below the 1e-38 clamp (which is itself subnormal, so a build with
// -ftz would fail here), infinities and NaNs. Codes and absmax NaN-ness must match; NaN bits are
// platform-defined except in bf16.
TEST(KbitCuda, SubnormalAndNonFiniteInputMatchCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v;
  for (float base : {1e-40f, 5e-39f, 1e-38f, 2e-38f, 1e-45f}) {  // one block of 32 each
    for (int i = 0; i < 32; ++i) v.push_back(base * static_cast<float>((i * 7) % 13 - 6) / 6.0f);
  }
  for (int i = 0; i < 32; ++i) v.push_back(i == 5 ? inf : static_cast<float>(i) - 16.0f);
  for (int i = 0; i < 32; ++i) v.push_back(i == 9 ? nan : static_cast<float>(i) - 16.0f);
  for (int i = 0; i < 32; ++i) v.push_back(i == 0 ? -inf : 1e30f * static_cast<float>(i));  // overflows f16 output
  for (int i = 0; i < 13; ++i) v.push_back(i == 12 ? nan : 0.5f);                           // partial last block
  const auto x = at::tensor(v);
  for (const auto type : kTypes) {
    for (const auto dtype : kDtypes) {
      expect_same_as_cpu(x.to(dtype),
                         type,
                         32,
                         false,
                         kDtypes,
                         describe(type, 32, dtype, x.numel()) + " special",
                         /*nan_equal=*/true);
      // bf16 NaNs are canonical (0x7FC0) on both sides: no tolerance there.
      const Packed4bit cpu = quantize_4bit(x.to(dtype), type, 32);
      EXPECT_TRUE(
          bits_equal(dequantize_4bit(cpu, at::kBFloat16), dequantize_4bit(to_device(cpu, at::kCUDA), at::kBFloat16)));
    }
  }
}

// Buffers at odd offsets (views into larger tensors) take the scalar paths of the kernels.
TEST(KbitCuda, UnalignedBuffersMatchCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 300;
  for (const auto type : kTypes) {
    for (const auto dtype : kDtypes) {
      for (const int64_t n : {int64_t{65}, int64_t{4097}, int64_t{12345}}) {
        const std::string what = describe(type, 64, dtype, n) + " unaligned";
        SCOPED_TRACE(what);
        const auto x = random_input(n, dtype, seed++);
        const auto x_gpu = at::empty({n + 1}, x.options().device(at::kCUDA)).narrow(0, 1, n).copy_(x);
        ASSERT_TRUE(x_gpu.is_contiguous());
        const Packed4bit cpu = quantize_4bit(x, type, 64);
        Packed4bit gpu = quantize_4bit(x_gpu, type, 64);
        ASSERT_TRUE(bits_equal(cpu.packed, gpu.packed));
        EXPECT_TRUE(bits_equal(cpu.absmax, gpu.absmax));

        const int64_t bytes = (n + 1) / 2;
        gpu.packed = at::empty({bytes + 1}, gpu.packed.options()).narrow(0, 1, bytes).copy_(cpu.packed.view({-1}));
        for (const auto out : kDtypes) {
          EXPECT_TRUE(bits_equal(dequantize_4bit(cpu, out), dequantize_4bit(gpu, out))) << "dequantized to " << out;
        }
      }
    }
  }
}

// Opt-in (--gtest_also_run_disabled_tests): dequantize bandwidth as a fraction of a device-to-
// device copy's. The target is >= 85% on an H100.
TEST(KbitCudaBench, DISABLED_DequantizeBandwidth) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = int64_t{8192} * 8192;
  const Packed4bit q = to_device(quantize_4bit(random_input(n, at::kFloat, 7), QuantType::nf4, 64), at::kCUDA);
  const auto seconds = [](auto&& f) {
    for (int i = 0; i < 3; ++i) f();
    c10::cuda::device_synchronize();
    constexpr int kIters = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) f();
    c10::cuda::device_synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kIters;
  };
  for (const auto dtype : kDtypes) {
    at::Tensor out;
    const double t_dq = seconds([&] { out = dequantize_4bit(q, dtype); });
    at::Tensor copy = at::empty_like(out);
    const double t_copy = seconds([&] { copy.copy_(out); });
    const double dq_bytes = static_cast<double>(q.packed.nbytes() + q.absmax.nbytes() + out.nbytes());
    const double copy_bytes = 2.0 * static_cast<double>(out.nbytes());
    const double ratio = (dq_bytes / t_dq) / (copy_bytes / t_copy);
    std::printf("dequantize nf4 -> %s: %.1f GB/s, copy %.1f GB/s, ratio %.3f\n",
                c10::toString(dtype),
                dq_bytes / t_dq / 1e9,
                copy_bytes / t_copy / 1e9,
                ratio);
    EXPECT_GE(ratio, 0.85) << dtype;
  }
}

}  // namespace
}  // namespace qtrain::ops
