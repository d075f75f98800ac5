// AdamW8bit on CUDA tensors, where its blockwise quantizer runs as ATen ops
// (ops/quant/blockwise_8bit.h): the quantizer equals the CPU loop bit for bit on the same input,
// and a few optimizer steps track the CPU run. Each test skips itself where no CUDA device is
// present.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "engine/train/adamw_8bit.h"
#include "ops/quant/blockwise_8bit.h"
#include "ops/quant/codebook.h"
#include "tests/reference.h"

namespace qtrain::engine::train {
namespace {

TEST(AdamW8bitCuda, QuantizerEqualsTheCpuLoopBitwise) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (const int64_t n : {255, 4097, 70000}) {
    auto x = at::randn({n}, gen) * at::exp(at::rand({n}, gen) * -18.0);
    x.narrow(0, 0, std::min<int64_t>(n, 256)).zero_();  // an all-zero block
    for (const bool is_signed : {true, false}) {
      const auto input = is_signed ? x : x * x;
      const auto& code = is_signed ? ops::dynamic_map_signed() : ops::dynamic_map_unsigned();
      const int64_t blocks = (n + 255) / 256;
      auto codes = at::empty({n}, at::kByte), absmax = at::empty({blocks});
      ops::quantize_blockwise_8bit_into(input, code, 256, codes, absmax);
      const auto cuda = input.cuda();
      auto codes_cuda = at::empty({n}, cuda.options().dtype(at::kByte));
      auto absmax_cuda = at::empty({blocks}, cuda.options());
      ops::quantize_blockwise_8bit_into(cuda, code, 256, codes_cuda, absmax_cuda);
      EXPECT_TRUE(test::bitwise_equal(codes, codes_cuda.cpu())) << n << " signed " << is_signed;
      EXPECT_TRUE(test::bitwise_equal(absmax, absmax_cuda.cpu())) << n;
      const auto table = at::from_blob(const_cast<float*>(code.data()), {256}, at::kFloat).clone();
      auto out = at::empty({n}), out_cuda = at::empty({n}, cuda.options());
      ops::dequantize_blockwise_8bit_into(codes, absmax, table, 256, out);
      ops::dequantize_blockwise_8bit_into(codes_cuda, absmax_cuda, table.cuda(), 256, out_cuda);
      EXPECT_TRUE(test::bitwise_equal(out, out_cuda.cpu())) << n;
    }
  }
}

// The ATen ops of the update are separate kernels on both devices, but CUDA's may contract a
// multiply and an add into one rounding where the CPU's do not, so moments can differ in the last
// bit, and a moment on a code boundary then takes the neighbouring code. One such flip moves that
// element's update by at most about one Adam step (|m / sqrt(v)| <= 1 / sqrt(1 - beta2) = 3.2 for
// beta2 = 0.9, times lr); the bound allows one per step. Most codes stay equal.
TEST(AdamW8bitCuda, StepsTrackTheCpuRun) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kSteps = 5;
  constexpr double kLr = 1e-3;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto init = at::randn({64, 80}, gen);
  std::vector<at::Tensor> grads;
  for (int64_t s = 0; s < kSteps; ++s) grads.push_back(at::randn({64, 80}, gen));
  AdamWOptions options;
  options.beta2 = 0.9;
  options.weight_decay = 0.01;
  auto cpu_param = init.clone().requires_grad_(true);
  auto cuda_param = init.cuda().requires_grad_(true);
  AdamW8bit cpu({cpu_param}, options), cuda({cuda_param}, options);
  for (int64_t s = 0; s < kSteps; ++s) {
    cpu_param.mutable_grad() = grads[s].clone();
    cuda_param.mutable_grad() = grads[s].cuda();
    cpu.step(kLr);
    cuda.step(kLr);
  }
  const double diff = (cpu_param.detach() - cuda_param.detach().cpu()).abs().max().item<double>();
  EXPECT_LE(diff, kSteps * kLr * 3.2) << "max |cpu - cuda| after " << kSteps << " steps";
  const auto a = cpu.state_tensors(), b = cuda.state_tensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 1; i < a.size(); ++i) {
    if (a[i].second.scalar_type() != at::kByte) continue;
    const auto same = (a[i].second == b[i].second.cpu()).to(at::kDouble).mean().item<double>();
    EXPECT_GE(same, 0.99) << a[i].first;
  }
}

}  // namespace
}  // namespace qtrain::engine::train
