// causal_attention on CUDA (ops/nn/attention.cpp) against the same call on the CPU in float32,
// and the kernel it picks judged by its memory: with grouped-query heads where flash cannot run
// (Gemma 4's 512-wide global heads, or a packed batch's mask), a forward and backward must hold
// less than the [B, heads, T, T] float32 scores and probabilities that torch's math kernel keeps
// (Note [Which CUDA attention kernel]). Skips itself where no CUDA device is present.
#include <cstdio>
#include <string>

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <gtest/gtest.h>

#include "ops/nn/attention.h"

namespace qtrain::ops {
namespace {

struct Case {
  std::string name;
  int64_t heads, kv_heads, head_dim, t;
  bool packed;  // two segments, so a [B, 1, T, T] mask
};

TEST(AttentionCuda, GroupedHeadsMatchTheCpuAndNeverKeepTheScores) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  at::empty({1}, at::TensorOptions().device(cuda));  // initialises CUDA before the allocator is asked
  for (const Case& k : {Case{"gemma4-global", 16, 2, 512, 2048, false},
                        Case{"gemma4-global-packed", 16, 2, 512, 2048, true},
                        Case{"gemma4-sliding", 16, 8, 256, 2048, false},
                        Case{"llama-packed", 32, 8, 128, 2048, true}}) {
    SCOPED_TRACE(k.name);
    at::manual_seed(3);
    const auto q = at::randn({1, k.heads, k.t, k.head_dim});
    const auto kk = at::randn({1, k.kv_heads, k.t, k.head_dim});
    const auto v = at::randn({1, k.kv_heads, k.t, k.head_dim});
    at::Tensor segments;
    if (k.packed) segments = (at::arange(k.t) >= k.t / 3).to(at::kLong).unsqueeze(0);
    const auto want = causal_attention(q, kk, v, {}, segments);

    const auto to_gpu = [&](const at::Tensor& t) { return t.to(cuda, at::kBFloat16).requires_grad_(true); };
    const auto gq = to_gpu(q), gk = to_gpu(kk), gv = to_gpu(v);
    const auto gsegments = segments.defined() ? segments.to(cuda) : segments;
    c10::cuda::CUDACachingAllocator::emptyCache();
    const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    const auto got = causal_attention(gq, gk, gv, {}, gsegments);
    got.sum().backward();
    const int64_t peak = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak - before;
    const int64_t scores = 2 * k.heads * k.t * k.t * 4;  // the math kernel's float32 scores and probabilities
    std::printf("[attention] %s: peak %.1f MiB over the inputs, the math kernel's scores %.1f MiB\n",
                k.name.c_str(),
                static_cast<double>(peak) / (1 << 20),
                static_cast<double>(scores) / (1 << 20));
    EXPECT_LT(peak, scores);
    // bfloat16 inputs against float32: an 8-bit mantissa on q, k and v and the output.
    EXPECT_TRUE(at::allclose(got.detach().cpu().to(at::kFloat), want, 2e-2, 2e-2))
        << (got.detach().cpu().to(at::kFloat) - want).abs().max().item<float>();
    EXPECT_TRUE(gk.grad().defined() && gv.grad().defined());
  }
}

}  // namespace
}  // namespace qtrain::ops
