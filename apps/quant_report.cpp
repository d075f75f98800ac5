// See quant_report.h.
#include "apps/quant_report.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "ops/quant/int8.h"
#include "ops/quant/kbit.h"

namespace qtrain::apps {
namespace {

struct Options {
  int64_t rows = 4096;
  int64_t cols = 14336;
  int64_t blocksize = 64;
  std::string dtype = "bf16";
  std::string device = "cpu";
  int repeats = 3;
  uint64_t seed = 0;
};

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp16" || name == "float16") return at::kHalf;
  if (name == "fp32" || name == "float32") return at::kFloat;
  throw CLI::ValidationError("--dtype", "'" + name + "' is not one of bf16, fp16, fp32");
}

void sync(const at::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

// Best of `repeats` wall times in seconds.
double best_seconds(const at::Device& device, int repeats, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    sync(device);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    sync(device);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Row {
  std::string format;
  double bits_per_param;
  double mean_abs_err;
  double rel_err;
  double quantize_s;
  double dequantize_s;
  double dequant_gbps;
};

void print_row(const Row& r) {
  std::printf("%-14s %9.3f %12.5f %9.4f %11.1f %13.1f %11.1f\n",
              r.format.c_str(),
              r.bits_per_param,
              r.mean_abs_err,
              r.rel_err,
              r.quantize_s * 1e3,
              r.dequantize_s * 1e3,
              r.dequant_gbps);
  std::fflush(stdout);
}

void run(const Options& o) {
  const auto dtype = parse_dtype(o.dtype);
  const at::Device device(o.device);
  at::manual_seed(o.seed);
  std::printf("qtrain quant-report: weight [%lld, %lld] %s on %s, blocksize %lld, %d threads, best of %d\n",
              static_cast<long long>(o.rows),
              static_cast<long long>(o.cols),
              o.dtype.c_str(),
              device.str().c_str(),
              static_cast<long long>(o.blocksize),
              at::get_num_threads(),
              o.repeats);
  // Llama-like weight statistics: Gaussian with a std of ~0.02.
  const auto w = (at::randn({o.rows, o.cols}, at::TensorOptions().device(device)) * 0.02).to(dtype);
  const double n = static_cast<double>(w.numel());
  const auto w32 = w.to(at::kFloat);
  const double w_abs_mean = w32.abs().mean().item<double>();
  std::printf("%-14s %9s %12s %9s %11s %13s %11s\n",
              "format",
              "bits/par",
              "mean|err|",
              "rel err",
              "quant ms",
              "dequant ms",
              "dequant GB/s");

  auto report = [&](const std::string& name, double bytes, const at::Tensor& restored, double qs, double ds) {
    const double err = (restored.to(at::kFloat) - w32).abs().mean().item<double>();
    // Bytes moved by dequantize: the quantized form read + the output written.
    const double moved = bytes + n * static_cast<double>(c10::elementSize(dtype));
    print_row({name, bytes * 8 / n, err, err / w_abs_mean, qs, ds, moved / ds / 1e9});
  };

  for (auto [name, type, dq] : {std::tuple{"nf4", ops::QuantType::nf4, false},
                                std::tuple{"nf4+dq", ops::QuantType::nf4, true},
                                std::tuple{"fp4", ops::QuantType::fp4, false}}) {
    ops::Packed4bit q;
    const double qs = best_seconds(device, o.repeats, [&] { q = ops::quantize_4bit(w, type, o.blocksize, dq); });
    at::Tensor restored;
    const double ds = best_seconds(device, o.repeats, [&] { restored = ops::dequantize_4bit(q); });
    report(name, static_cast<double>(q.nbytes()), restored, qs, ds);
  }
  std::unique_ptr<ops::Int8Weight> q8;
  const double qs =
      best_seconds(device, o.repeats, [&] { q8 = std::make_unique<ops::Int8Weight>(ops::Int8Weight::from_float(w)); });
  at::Tensor restored;
  const double ds = best_seconds(device, o.repeats, [&] { restored = q8->dequantize(dtype); });
  report("int8", static_cast<double>(q8->nbytes()), restored, qs, ds);
  std::printf("rel err = mean|err| / mean|w|. bits/par counts codes and scales (absmax, nested absmax, SCB).\n");
}

}  // namespace

void add_quant_report_command(CLI::App& app) {
  auto opts = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "quant-report",
      "Quantize a model-sized random weight to NF4, NF4 + double quant, FP4 and INT8 and report error, size and speed");
  cmd->add_option("--rows", opts->rows, "weight rows (output features)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--cols", opts->cols, "weight columns (input features)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--blocksize", opts->blocksize, "4-bit blocksize (32..4096, power of two)")->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "weight dtype: bf16, fp16, fp32")->capture_default_str();
  cmd->add_option("--device", opts->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--repeats", opts->repeats, "timed repetitions (best is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed of the weight")->capture_default_str();
  cmd->callback([opts] { run(*opts); });
}

}  // namespace qtrain::apps
