// Dequantization throughput of qtrain's NF4 (with and without double quant) and INT8 weights,
// next to a plain copy of the same output bytes (the memory-bandwidth limit). bench/dequant.py
// runs this and bitsandbytes on the same shapes and writes the comparison table.
//
// Bytes per iteration = quantized bytes read + output bytes written, for every case (the copy
// case reads and writes the output size).
#include <string>

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include "ops/quant/int8.h"
#include "ops/quant/kbit.h"

namespace {

using qtrain::ops::Int8Weight;
using qtrain::ops::Packed4bit;
using qtrain::ops::QuantType;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {8192, 28672}};

at::Device bench_device() {
  const char* d = std::getenv("QTRAIN_BENCH_DEVICE");
  return at::Device(d ? d : "cpu");
}

void sync(const at::Tensor& t) {
  if (t.is_cuda()) t.cpu();  // cheap (tiny slice) way to wait for the stream without CUDA headers
}

at::Tensor weight(int64_t rows, int64_t cols) {
  at::manual_seed(0);
  return (at::randn({rows, cols}, at::TensorOptions().device(bench_device())) * 0.02).to(at::kBFloat16);
}

void BM_dequant_nf4(benchmark::State& state, bool double_quant) {
  const auto w = weight(state.range(0), state.range(1));
  const Packed4bit q = qtrain::ops::quantize_4bit(w, QuantType::nf4, 64, double_quant);
  at::Tensor out;
  for (auto _ : state) {
    out = qtrain::ops::dequantize_4bit(q, at::kBFloat16);
    sync(out.view({-1}).narrow(0, 0, 1));
  }
  state.SetBytesProcessed(state.iterations() * (q.nbytes() + out.nbytes()));
}

// Into a reused workspace: what a training step does, and the number to hold against the copy.
void BM_dequant_nf4_into(benchmark::State& state, bool double_quant) {
  const auto w = weight(state.range(0), state.range(1));
  const Packed4bit q = qtrain::ops::quantize_4bit(w, QuantType::nf4, 64, double_quant);
  auto out = at::empty_like(w);
  for (auto _ : state) {
    qtrain::ops::dequantize_4bit_into(q, out);
    sync(out.view({-1}).narrow(0, 0, 1));
  }
  state.SetBytesProcessed(state.iterations() * (q.nbytes() + out.nbytes()));
}

void BM_dequant_int8(benchmark::State& state) {
  const auto q = Int8Weight::from_float(weight(state.range(0), state.range(1)));
  at::Tensor out;
  for (auto _ : state) {
    out = q.dequantize(at::kBFloat16);
    sync(out.view({-1}).narrow(0, 0, 1));
  }
  state.SetBytesProcessed(state.iterations() * (q.nbytes() + out.nbytes()));
}

void BM_copy(benchmark::State& state) {
  const auto w = weight(state.range(0), state.range(1));
  auto out = at::empty_like(w);
  for (auto _ : state) {
    out.copy_(w);
    sync(out.view({-1}).narrow(0, 0, 1));
  }
  state.SetBytesProcessed(state.iterations() * 2 * w.nbytes());
}

void shapes(benchmark::internal::Benchmark* b) {
  for (auto [r, c] : kShapes) b->Args({r, c});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
}

BENCHMARK_CAPTURE(BM_dequant_nf4, nf4, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_dequant_nf4, nf4_dq, true)->Apply(shapes);
BENCHMARK_CAPTURE(BM_dequant_nf4_into, nf4, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_dequant_nf4_into, nf4_dq, true)->Apply(shapes);
BENCHMARK(BM_dequant_int8)->Apply(shapes);
BENCHMARK(BM_copy)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
