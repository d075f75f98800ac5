// See blockwise_8bit.h.
#include "ops/quant/blockwise_8bit.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace qtrain::ops {

// Note [The 8-bit grid quantizer]
// bitsandbytes' CPU quantizer (csrc/cpu_ops.cpp, quantize_cpu_impl) does not search the nearest
// code. Per block it takes absmax = max |x| (an all-zero block stores absmax 0 and code byte 0),
// scales by the float32 reciprocal inv = 1.0f / absmax, and maps v = clamp(x * inv, -1, 1) to the
// bin (uint16)((v + 1) * 0.5f * 65535 + 0.5f) of a grid over [-1, 1]. A table built once per
// code gives each bin i the code whose midpoint interval holds -1 + 2i / 65535 (float32
// midpoints 0.5f * (code[j] + code[j + 1]); a bin on a midpoint takes the lower code). So it is
// nearest to within a bin (3e-5): an exact 0.0 lands on bin 32768 (+1.5e-5) and takes the code
// nearest that, and codes closer together than a bin (the signed map's fine steps near 0) are
// never chosen. bitsandbytes' CUDA kernels search the exact nearest code instead, so a fresh
// quantization on a GPU differs from the CPU one by a code here and there (see
// docs/OPTIMIZERS.md). bitsandbytes' library may fuse the bin arithmetic into a multiply-add where
// ours rounds each step; the bytes still agree (AdamW8bit's state and the nested absmax are
// compared with bitsandbytes' own in engine/train/adamw_8bit_test and ops/quant/kbit_test).
namespace {

constexpr int kGridBins = 65536;

struct GridLut {
  std::array<uint8_t, kGridBins> lut;
  // Copies of `lut` on the devices that asked for one (device_table): copied once, since a copy
  // from pageable memory makes the host wait for the device (Note [Host reads]).
  std::mutex mutex;
  std::unordered_map<at::Device, at::Tensor> on_device;
};

std::unique_ptr<GridLut> make_grid_lut(const std::array<float, 256>& code) {
  std::array<float, 255> mid{};
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (code[i] + code[i + 1]);
  auto g = std::make_unique<GridLut>();
  int idx = 0;
  for (int i = 0; i < kGridBins; ++i) {
    const float val = -1.0f + (2.0f * static_cast<float>(i)) / 65535.0f;
    while (idx < 255 && mid[idx] < val) ++idx;
    g->lut[i] = static_cast<uint8_t>(idx);
  }
  return g;
}

// One table per distinct code, built on first use and kept for the process.
// Never destroyed: its device tensors must not be freed after CUDA has shut down at exit.
GridLut& grid_lut(const std::array<float, 256>& code) {
  static std::mutex mutex;
  static auto* luts = new std::vector<std::pair<std::array<float, 256>, std::unique_ptr<GridLut>>>();
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [c, l] : *luts) {
    if (c == code) return *l;
  }
  luts->emplace_back(code, make_grid_lut(code));
  return *luts->back().second;
}

// The table of `code` as a uint8 tensor on `device`.
at::Tensor device_table(const std::array<float, 256>& code, const at::Device& device) {
  auto& g = grid_lut(code);
  std::lock_guard<std::mutex> lock(g.mutex);
  auto& t = g.on_device[device];
  if (!t.defined()) t = at::from_blob(g.lut.data(), {kGridBins}, at::kByte).to(device, /*non_blocking=*/false);
  return t;
}

inline uint16_t grid_index(float v) {
  if (std::isnan(v)) v = 0.0f;  // as the ATen form's nan_to_num (a skipped step's moments; the codes are discarded)
  v = std::clamp(v, -1.0f, 1.0f);
  return static_cast<uint16_t>((v + 1.0f) * 0.5f * 65535.0f + 0.5f);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Blocks per parallel task: a block is 256 to a few thousand elements.
constexpr int64_t kBlocksPerTask = 64;

void check_quantize_args(const at::Tensor& x, int64_t blocksize, const at::Tensor& codes, const at::Tensor& absmax) {
  TORCH_CHECK(blocksize > 0, "quantize_blockwise_8bit: blocksize must be positive, got ", blocksize);
  TORCH_CHECK(x.defined() && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "quantize_blockwise_8bit: x must be a contiguous float32 tensor");
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && codes.numel() == x.numel() &&
                  codes.device() == x.device(),
              "quantize_blockwise_8bit: codes must be a contiguous uint8 tensor of ",
              x.numel(),
              " elements on ",
              x.device(),
              ", got ",
              codes.scalar_type(),
              " ",
              codes.sizes(),
              " on ",
              codes.device());
  TORCH_CHECK(absmax.scalar_type() == at::kFloat && absmax.is_contiguous() &&
                  absmax.numel() == ceil_div(x.numel(), blocksize) && absmax.device() == x.device(),
              "quantize_blockwise_8bit: absmax must be a contiguous float32 tensor of ",
              ceil_div(x.numel(), blocksize),
              " elements on ",
              x.device(),
              ", got ",
              absmax.scalar_type(),
              " ",
              absmax.sizes(),
              " on ",
              absmax.device());
}

// x (n elements) as [blocks, blocksize], zero-padded at the end.
at::Tensor as_blocks(const at::Tensor& x, int64_t blocksize) {
  const int64_t n = x.numel();
  const int64_t padded = ceil_div(n, blocksize) * blocksize;
  auto flat = x.reshape({n});
  if (padded != n) flat = at::constant_pad_nd(flat, {0, padded - n}, 0);
  return flat.view({-1, blocksize});
}

}  // namespace

void quantize_blockwise_8bit_aten(
    const at::Tensor& x, const std::array<float, 256>& code, int64_t blocksize, at::Tensor& codes, at::Tensor& absmax) {
  check_quantize_args(x, blocksize, codes, absmax);
  const auto table = device_table(code, x.device());
  const auto blocks = as_blocks(x, blocksize);
  // Padding zeros never raise a maximum of absolute values.
  const auto amax = blocks.abs().amax({1});
  absmax.copy_(amax);
  // The same float32 steps as grid_index, one rounding each. An all-zero block scales 0 * inf
  // to NaN: it is set to 0 (a valid bin) here and its codes to 0 by the mask below.
  auto bins =
      (blocks * at::reciprocal(amax).unsqueeze(1)).clamp_(-1, 1).nan_to_num_(0).add_(1).mul_(0.5).mul_(65535).add_(0.5);
  auto q = table.index({bins.to(at::kLong)});
  q.masked_fill_((amax == 0).unsqueeze(1), 0);
  codes.view({-1}).copy_(q.view({-1}).narrow(0, 0, x.numel()));
}

void quantize_blockwise_8bit_into(
    const at::Tensor& x, const std::array<float, 256>& code, int64_t blocksize, at::Tensor& codes, at::Tensor& absmax) {
  check_quantize_args(x, blocksize, codes, absmax);
  if (!x.device().is_cpu()) {
    quantize_blockwise_8bit_aten(x, code, blocksize, codes, absmax);
    return;
  }
  const auto& lut = grid_lut(code).lut;
  const int64_t n = x.numel();
  const float* in = x.const_data_ptr<float>();
  uint8_t* out = codes.data_ptr<uint8_t>();
  float* am = absmax.data_ptr<float>();
  at::parallel_for(0, ceil_div(n, blocksize), kBlocksPerTask, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t start = b * blocksize, end = std::min(n, start + blocksize);
      float amax = 0.f;
      for (int64_t i = start; i < end; ++i) amax = std::max(amax, std::fabs(in[i]));
      am[b] = amax;
      if (amax == 0.f) {
        std::fill(out + start, out + end, 0);
        continue;
      }
      const float inv = 1.0f / amax;
      for (int64_t i = start; i < end; ++i) out[i] = lut[grid_index(in[i] * inv)];
    }
  });
}

Blockwise8bit quantize_blockwise_8bit(const at::Tensor& x, const std::array<float, 256>& code, int64_t blocksize) {
  TORCH_CHECK(x.device().is_cpu(), "quantize_blockwise_8bit: x must be a CPU tensor, got ", x.device());
  TORCH_CHECK(blocksize > 0, "quantize_blockwise_8bit: blocksize must be positive, got ", blocksize);
  Blockwise8bit r{at::empty(x.sizes(), x.options().dtype(at::kByte)),
                  at::empty({ceil_div(x.numel(), blocksize)}, x.options().dtype(at::kFloat))};
  quantize_blockwise_8bit_into(x, code, blocksize, r.codes, r.absmax);
  return r;
}

void dequantize_blockwise_8bit_aten(
    const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
  const int64_t n = codes.numel();
  // code[byte] * absmax: the same single float32 multiply as the CPU loop.
  auto values = code.index({codes.reshape({n}).to(at::kLong)});
  auto scaled = as_blocks(values, blocksize).mul_(absmax.unsqueeze(1));
  out.view({n}).copy_(scaled.view({-1}).narrow(0, 0, n));
}

void dequantize_blockwise_8bit_into(
    const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
  TORCH_CHECK(blocksize > 0, "dequantize_blockwise_8bit: blocksize must be positive, got ", blocksize);
  TORCH_CHECK(codes.scalar_type() == at::kByte && absmax.scalar_type() == at::kFloat &&
                  code.scalar_type() == at::kFloat && code.numel() == 256,
              "dequantize_blockwise_8bit: expects uint8 codes, float32 absmax and a float32 [256] code");
  const int64_t n = codes.numel();
  TORCH_CHECK(absmax.numel() == ceil_div(n, blocksize),
              "dequantize_blockwise_8bit: ",
              absmax.numel(),
              " absmax values for ",
              n,
              " codes in blocks of ",
              blocksize);
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.is_contiguous() && out.numel() == n &&
                  out.device() == codes.device() && absmax.device() == codes.device() &&
                  code.device() == codes.device(),
              "dequantize_blockwise_8bit: out must be a contiguous float32 tensor of ",
              n,
              " elements, and every tensor on ",
              codes.device());
  if (!codes.device().is_cpu()) {
    dequantize_blockwise_8bit_aten(codes, absmax, code, blocksize, out);
    return;
  }
  const auto c = codes.contiguous();
  const auto a = absmax.contiguous();
  const auto table = code.contiguous();
  const uint8_t* in = c.const_data_ptr<uint8_t>();
  const float* am = a.const_data_ptr<float>();
  const float* t = table.const_data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, ceil_div(n, blocksize), kBlocksPerTask, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t start = b * blocksize, end = std::min(n, start + blocksize);
      for (int64_t i = start; i < end; ++i) o[i] = t[in[i]] * am[b];
    }
  });
}

at::Tensor dequantize_blockwise_8bit(const at::Tensor& codes,
                                     const at::Tensor& absmax,
                                     const at::Tensor& code,
                                     int64_t blocksize) {
  auto out = at::empty(codes.sizes(), absmax.options());
  dequantize_blockwise_8bit_into(codes, absmax, code, blocksize, out);
  return out;
}

int64_t blockwise_8bit_nbytes(int64_t n, int64_t blocksize) {
  return n + ceil_div(n, blocksize) * 4;
}

int64_t adam_8bit_moments_nbytes(int64_t n) {
  if (n < kOptimizerMin8bitNumel) return 2 * n * 4;
  return 2 * blockwise_8bit_nbytes(n, kOptimizerStateBlocksize);
}

}  // namespace qtrain::ops
