// The CUDA LLM.int8() row-wise kernels (ops/cuda/int8.cu) against the CPU reference
// (ops/quant/int8.cpp), bit for bit: int8 codes, row absmax (SCB) and outlier columns with and
// without a threshold, zero rows, rows of outliers only, dequantization, and buffers at odd
// offsets. Each test skips itself where no CUDA device is present.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "ops/quant/int8.h"

namespace qtrain::ops {
namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf};
// Column counts that are and are not multiples of the kernels' vector widths (4 and 8).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {1, 7}, {3, 5}, {4, 8}, {7, 64}, {16, 4096}, {33, 1001}, {5, 12288}, {256, 4096}};

std::string describe(int64_t rows, int64_t cols, at::ScalarType dtype, double threshold) {
  std::ostringstream s;
  s << "[" << rows << ", " << cols << "] " << dtype << " threshold " << threshold;
  return s.str();
}

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

// Bitwise equality; on failure names how many elements differ and the first one.
testing::AssertionResult bits_equal(const at::Tensor& expected, const at::Tensor& actual) {
  if (expected.scalar_type() != actual.scalar_type() || !expected.sizes().equals(actual.sizes())) {
    return testing::AssertionFailure() << "expected " << expected.scalar_type() << " " << expected.sizes() << ", got "
                                       << actual.scalar_type() << " " << actual.sizes();
  }
  const auto where = (as_bits(expected) != as_bits(actual)).nonzero();
  if (where.size(0) == 0) return testing::AssertionSuccess();
  const int64_t i = where[0][0].item<int64_t>();
  return testing::AssertionFailure() << where.size(0) << " of " << expected.numel() << " elements differ; first at "
                                     << i << ": expected " << expected.cpu().reshape({-1})[i].item<double>() << ", got "
                                     << actual.cpu().reshape({-1})[i].item<double>();
}

// Normal values with standard deviation 2 (so threshold 6 finds outliers), a zero row, and a
// row of outliers only (all 10.0) when there are at least 3 rows.
at::Tensor random_matrix(int64_t rows, int64_t cols, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto a = at::randn({rows, cols}, gen) * 2.0;
  if (rows >= 3) {
    a[1].zero_();
    a[2].fill_(10.0);
  }
  return a.to(dtype);
}

void expect_quant_same_as_cpu(const at::Tensor& a_cpu,
                              const at::Tensor& a_gpu,
                              double threshold,
                              const std::string& what) {
  SCOPED_TRACE(what);
  const Int8Rowwise cpu = int8_vectorwise_quant(a_cpu, threshold);
  const Int8Rowwise gpu = int8_vectorwise_quant(a_gpu, threshold);
  ASSERT_TRUE(gpu.q.is_cuda());
  EXPECT_TRUE(bits_equal(cpu.q, gpu.q)) << "int8 codes";
  EXPECT_TRUE(bits_equal(cpu.row_absmax, gpu.row_absmax)) << "row absmax";
  ASSERT_EQ(cpu.outlier_cols.defined(), gpu.outlier_cols.defined());
  if (cpu.outlier_cols.defined()) {
    EXPECT_TRUE(at::equal(cpu.outlier_cols, gpu.outlier_cols.cpu())) << "outlier columns";
  }
}

TEST(Int8Cuda, QuantizeMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 1;
  for (const auto& [rows, cols] : kShapes) {
    for (const auto dtype : kDtypes) {
      for (const double threshold : {0.0, 6.0}) {
        const auto a = random_matrix(rows, cols, dtype, seed++);
        expect_quant_same_as_cpu(a, a.cuda(), threshold, describe(rows, cols, dtype, threshold));
        if (HasFatalFailure()) return;
      }
    }
  }
  // Leading dimensions are rows.
  const auto a = random_matrix(6, 64, at::kHalf, seed++).view({2, 3, 64});
  expect_quant_same_as_cpu(a, a.cuda(), 6.0, "[2, 3, 64] float16");
}

TEST(Int8Cuda, DequantizeMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 100;
  for (const auto& [rows, cols] : kShapes) {
    SCOPED_TRACE(describe(rows, cols, at::kFloat, 0.0));
    const Int8Rowwise r = int8_vectorwise_quant(random_matrix(rows, cols, at::kFloat, seed++));
    const auto expected = int8_vectorwise_dequant(r.q, r.row_absmax);
    const auto actual = int8_vectorwise_dequant(r.q.cuda(), r.row_absmax.cuda());
    ASSERT_TRUE(actual.is_cuda());
    EXPECT_TRUE(bits_equal(expected, actual));
  }
}

// Buffers at odd offsets (views into larger tensors) take the scalar paths of the kernels.
TEST(Int8Cuda, UnalignedBuffersMatchCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 200;
  for (const auto dtype : kDtypes) {
    for (const double threshold : {0.0, 6.0}) {
      const int64_t rows = 9, cols = 256;
      const auto a = random_matrix(rows, cols, dtype, seed++);
      const auto a_gpu = at::empty({rows * cols + 1}, a.options().device(at::kCUDA))
                             .narrow(0, 1, rows * cols)
                             .view({rows, cols})
                             .copy_(a);
      expect_quant_same_as_cpu(a, a_gpu, threshold, describe(rows, cols, dtype, threshold) + " unaligned");

      const Int8Rowwise r = int8_vectorwise_quant(a, threshold);
      const auto q_gpu = at::empty({rows * cols + 1}, r.q.options().device(at::kCUDA))
                             .narrow(0, 1, rows * cols)
                             .view({rows, cols})
                             .copy_(r.q);
      EXPECT_TRUE(
          bits_equal(int8_vectorwise_dequant(r.q, r.row_absmax), int8_vectorwise_dequant(q_gpu, r.row_absmax.cuda())));
    }
  }
}

// Int8Weight quantizes through float16 on either device; CB and SCB must be the same.
TEST(Int8Cuda, WeightFromFloatMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto w = random_matrix(64, 320, at::kBFloat16, 300);
  const auto cpu = Int8Weight::from_float(w);
  const auto gpu = Int8Weight::from_float(w.cuda());
  EXPECT_TRUE(bits_equal(cpu.cb(), gpu.cb()));
  EXPECT_TRUE(bits_equal(cpu.scb(), gpu.scb()));
}

}  // namespace
}  // namespace qtrain::ops
