// 8-bit blockwise quantization: the ATen-op forms that non-CPU devices run equal the CPU loops
// bit for bit over a grid of sizes (partial blocks, all-zero blocks, both dynamic maps), and a
// dequantize of a quantize stays within the code spacing. Parity of the CPU loops with
// bitsandbytes is tested through the nested absmax (kbit_test) and AdamW8bit's state
// (engine/train/adamw_8bit_test).
#include "ops/quant/blockwise_8bit.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "ops/quant/codebook.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::ops {
namespace {

at::Tensor as_tensor(const std::array<float, 256>& code) {
  return at::from_blob(const_cast<float*>(code.data()), {256}, at::kFloat).clone();
}

TEST(Blockwise8bit, AtenFormEqualsCpuLoopBitwise) {
  at::manual_seed(5);
  for (const bool is_signed : {true, false}) {
    const auto& code = is_signed ? dynamic_map_signed() : dynamic_map_unsigned();
    for (const int64_t n : {1, 255, 256, 257, 4096, 5000}) {
      for (const int64_t blocksize : {64, 256}) {
        // Magnitudes over eight decades, so that every part of the map is used.
        auto x = at::randn({n}) * at::exp(at::rand({n}) * -18.0);
        if (!is_signed) x = x * x;
        if (n > 2 * blocksize) x.narrow(0, blocksize, blocksize).zero_();  // an all-zero block
        const int64_t blocks = (n + blocksize - 1) / blocksize;
        auto codes = at::empty({n}, at::kByte), absmax = at::empty({blocks});
        auto codes_aten = at::empty({n}, at::kByte), absmax_aten = at::empty({blocks});
        quantize_blockwise_8bit_into(x, code, blocksize, codes, absmax);
        quantize_blockwise_8bit_aten(x, code, blocksize, codes_aten, absmax_aten);
        EXPECT_TRUE(test::bitwise_equal(codes, codes_aten)) << n << " " << blocksize << " signed " << is_signed;
        EXPECT_TRUE(test::bitwise_equal(absmax, absmax_aten)) << n << " " << blocksize;

        const auto table = as_tensor(code);
        auto out = at::empty({n}), out_aten = at::empty({n});
        dequantize_blockwise_8bit_into(codes, absmax, table, blocksize, out);
        dequantize_blockwise_8bit_aten(codes, absmax, table, blocksize, out_aten);
        EXPECT_TRUE(test::bitwise_equal(out, out_aten)) << n << " " << blocksize;
        // The largest gap between neighbouring codes is 0.0156 of the block absmax (near 1);
        // the grid adds at most half a bin (1.5e-5).
        const auto per_element = absmax.repeat_interleave(blocksize).narrow(0, 0, n);
        EXPECT_TRUE(((out - x).abs() <= per_element * 0.0079).all().item<bool>()) << n << " " << blocksize;
      }
    }
  }
}

TEST(Blockwise8bit, ZeroBlocksStoreCodeZeroAndAbsmaxZero) {
  auto x = at::zeros({300});
  x[299] = 0.5f;
  const auto r = quantize_blockwise_8bit(x, dynamic_map_signed(), 256);
  EXPECT_EQ(r.absmax[0].item<float>(), 0.0f);
  EXPECT_EQ(r.codes.narrow(0, 0, 256).count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(r.absmax[1].item<float>(), 0.5f);
  EXPECT_EQ(r.codes[299].item<uint8_t>(), 255);  // 1.0
  // Exact zeros in a non-zero block take the code nearest the grid's centre bin (+1.5e-5), as in
  // bitsandbytes' CPU quantizer: not code 127 (0.0).
  EXPECT_EQ(dynamic_map_signed()[r.codes[256].item<uint8_t>()], dynamic_map_signed()[131]);
}

TEST(Blockwise8bit, UnsignedMapIsSortedFromZeroToOne) {
  const auto& map = dynamic_map_unsigned();
  EXPECT_TRUE(std::is_sorted(map.begin(), map.end()));
  EXPECT_EQ(map[0], 0.0f);
  EXPECT_EQ(map[255], 1.0f);
  EXPECT_GT(map[1], 0.0f);
}

TEST(Blockwise8bit, RejectsBuffersThatDoNotFit) {
  const auto x = at::randn({300});
  auto codes = at::empty({300}, at::kByte), absmax = at::empty({1});
  test::expect_error([&] { quantize_blockwise_8bit_into(x, dynamic_map_signed(), 256, codes, absmax); },
                     "quantize_blockwise_8bit: absmax must be a contiguous float32 tensor of 2 elements on cpu, got "
                     "Float [1] on cpu");
  EXPECT_EQ(blockwise_8bit_nbytes(300, 256), 300 + 2 * 4);
  EXPECT_EQ(adam_8bit_moments_nbytes(4095), 2 * 4095 * 4);
  EXPECT_EQ(adam_8bit_moments_nbytes(4096), 2 * (4096 + 16 * 4));
}

}  // namespace
}  // namespace qtrain::ops
