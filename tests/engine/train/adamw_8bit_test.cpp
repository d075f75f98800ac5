// AdamW8bit: bitwise parity with bitsandbytes.optim.AdamW8bit run on its CPU backend (weights
// after every step and the final 8-bit state, on parameters above, at and below min_8bit_size),
// the bytes its state takes, a save/load of the state that resumes exactly, and the errors for
// state that does not fit.
#include "engine/train/adamw_8bit.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/train/adamw.h"
#include "ops/quant/codebook.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using test::bitwise_equal;
using test::expect_error;

// The tensors of `optim_reference.py adamw8bit`, made once per process (importing bitsandbytes
// takes seconds).
const test::ScriptTensors& adamw8bit_reference() {
  static const test::ScriptTensors reference = test::run_reference_script("optim_reference.py", "adamw8bit");
  return reference;
}

const at::Tensor& ref_tensor(const std::string& name) {
  const auto& ref = adamw8bit_reference();
  const auto it = ref.tensors.find(name);
  TORCH_CHECK(it != ref.tensors.end(), "optim_reference.py wrote no tensor '", name, "'");
  return it->second;
}

std::string index_name(const std::string& prefix, int64_t a) {
  return prefix + "." + std::to_string(a);
}

std::string index_name(const std::string& prefix, int64_t a, int64_t b) {
  return prefix + "." + std::to_string(a) + "." + std::to_string(b);
}

at::Tensor as_tensor(const std::array<float, 256>& code) {
  return at::from_blob(const_cast<float*>(code.data()), {256}, at::kFloat);
}

// Shapes [64, 80], [4100] (a partial last block), [16, 256] (exactly min_8bit_size), then
// [40, 100] and [16] below it; 8 steps with weight decay 0.01 and a new lr each step.
constexpr int64_t kParams = 5;
constexpr int64_t kSteps = 8;

// bitsandbytes runs the same ATen ops in the same order (Note [AdamW8bit update]) and its C++
// quantizer is the same grid lookup (Note [The 8-bit grid quantizer]), in the same torch build:
// so every weight and every state byte is expected equal, not merely close.
TEST(AdamW8bit, EqualsBitsandbytesAdamW8bitBitwise) {
  std::vector<at::Tensor> params;
  for (int64_t i = 0; i < kParams; ++i)
    params.push_back(ref_tensor(index_name("init", i)).clone().requires_grad_(true));
  AdamWOptions options;
  options.lr = 1e-3;
  options.beta1 = 0.9;
  options.beta2 = 0.95;
  options.eps = 1e-8;
  options.weight_decay = 0.01;
  AdamW8bit adamw(params, options);
  const std::vector<bool> eight_bit = {true, true, true, false, false};
  for (int64_t i = 0; i < kParams; ++i) EXPECT_EQ(adamw.is_8bit(i), eight_bit[i]) << i;

  const auto lrs = ref_tensor("lrs");
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int64_t i = 0; i < kParams; ++i) params[i].mutable_grad() = ref_tensor(index_name("grad", step, i)).clone();
    adamw.step(lrs[step].item<double>());
    adamw.zero_grad();
    for (int64_t i = 0; i < kParams; ++i) {
      const auto& expected = ref_tensor(index_name("param", step, i));
      ASSERT_TRUE(bitwise_equal(params[i].detach(), expected))
          << "parameter " << i << " differs from bitsandbytes after step " << step << " ("
          << test::count_bitwise_diff(params[i].detach(), expected) << " elements, max |diff| "
          << (params[i].detach() - expected).abs().max().item<float>() << ")";
    }
  }

  EXPECT_EQ(adamw.steps(), kSteps);
  EXPECT_EQ(ref_tensor("step").item<int64_t>(), kSteps);
  EXPECT_TRUE(bitwise_equal(as_tensor(ops::dynamic_map_signed()), ref_tensor("qmap1")));
  EXPECT_TRUE(bitwise_equal(as_tensor(ops::dynamic_map_unsigned()), ref_tensor("qmap2")));
  const auto state = adamw.state_tensors();
  const std::map<std::string, at::Tensor> ours(state.begin(), state.end());
  for (int64_t i = 0; i < kParams; ++i) {
    std::vector<std::pair<std::string, std::string>> keys = {{"exp_avg", "state1"}, {"exp_avg_sq", "state2"}};
    if (eight_bit[i]) {
      keys.push_back({"exp_avg_absmax", "absmax1"});
      keys.push_back({"exp_avg_sq_absmax", "absmax2"});
    }
    for (const auto& [mine, theirs] : keys) {
      EXPECT_TRUE(bitwise_equal(ours.at(index_name(mine, i)), ref_tensor(index_name(theirs, i))))
          << mine << "." << i << " vs bitsandbytes " << theirs;
    }
  }
}

// Deterministic test data: one parameter of 8-bit state ([64, 80], 20 blocks), one exactly at
// the 8-bit threshold with a partial block ([4097]) and one of float32 state ([10]).
std::vector<at::Tensor> test_params(uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (const auto& shape : {std::vector<int64_t>{64, 80}, {4097}, {10}}) {
    out.push_back(at::randn(shape, gen, at::kFloat).requires_grad_(true));
  }
  return out;
}

AdamWOptions test_options() {
  AdamWOptions options;
  options.lr = 2e-3;
  options.beta2 = 0.95;
  options.weight_decay = 0.05;
  return options;
}

void train(Optimizer& optimizer, int64_t from, int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    auto gen = at::detail::createCPUGenerator(1000 + step);
    for (const auto& p : optimizer.params()) p.mutable_grad() = at::randn(p.sizes(), gen, at::kFloat);
    optimizer.step(1e-3 * (1.0 + 0.1 * static_cast<double>(step % 3)));
    optimizer.zero_grad();
  }
}

TEST(AdamW8bit, StateTakesOneBytePerElementAndAnAbsmaxPerBlock) {
  AdamW8bit adamw(test_params(1), test_options());
  const auto state = adamw.state_tensors();
  std::vector<std::string> names;
  for (const auto& [name, t] : state) names.push_back(name);
  const std::vector<std::string> expected = {"step",
                                             "exp_avg.0",
                                             "exp_avg_sq.0",
                                             "exp_avg_absmax.0",
                                             "exp_avg_sq_absmax.0",
                                             "exp_avg.1",
                                             "exp_avg_sq.1",
                                             "exp_avg_absmax.1",
                                             "exp_avg_sq_absmax.1",
                                             "exp_avg.2",
                                             "exp_avg_sq.2"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(state[1].second.scalar_type(), at::kByte);
  EXPECT_EQ(state[1].second.sizes(), (std::vector<int64_t>{64, 80}));
  EXPECT_EQ(state[3].second.sizes(), (std::vector<int64_t>{20}));
  EXPECT_EQ(state[7].second.sizes(), (std::vector<int64_t>{17}));  // ceil(4097 / 256)
  EXPECT_EQ(state[9].second.scalar_type(), at::kFloat);
  // Two moments: 5120 + 20 * 4 and 4097 + 17 * 4 bytes each, 2 * 10 * 4 for the small one, and
  // the int64 step.
  const int64_t bytes = 2 * (5120 + 20 * 4) + 2 * (4097 + 17 * 4) + 2 * 10 * 4 + 8;
  EXPECT_EQ(adamw.state_nbytes(), bytes);
  EXPECT_EQ(
      ops::adam_8bit_moments_nbytes(5120) + ops::adam_8bit_moments_nbytes(4097) + ops::adam_8bit_moments_nbytes(10) + 8,
      bytes);
  // The 32-bit AdamW holds 8 bytes per element.
  AdamW full(test_params(1), test_options());
  EXPECT_EQ(full.state_nbytes(), 2 * 4 * (5120 + 4097 + 10) + 8);
}

TEST(AdamW8bit, ResumingFromSavedStateEqualsUninterruptedTrainingBitwise) {
  AdamW8bit uninterrupted(test_params(7), test_options());
  train(uninterrupted, 0, 12);

  AdamW8bit first(test_params(7), test_options());
  train(first, 0, 5);
  // Through a file, as a run-state checkpoint does it.
  const fs::path dir = fs::temp_directory_path() / ("qtrain_adamw8bit_state_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  io::safetensors_save(dir / "optimizer.safetensors", first.state_tensors());
  const auto loaded = io::safetensors_load(dir / "optimizer.safetensors");
  qtrain::engine::io::remove_tree(dir);
  std::vector<at::Tensor> params;
  for (const auto& p : first.params()) params.push_back(p.detach().clone().requires_grad_(true));
  AdamW8bit resumed(params, test_options());
  resumed.load_state_tensors(loaded, "optimizer.safetensors");
  EXPECT_EQ(resumed.steps(), 5);
  train(resumed, 5, 12);

  const auto a = uninterrupted.state_tensors();
  const auto b = resumed.state_tensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(bitwise_equal(a[i].second, b[i].second)) << a[i].first;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(uninterrupted.params()[i].detach(), resumed.params()[i].detach())) << i;
  }
}

TEST(AdamW8bit, LoadRejectsStateThatDoesNotFitAndKeepsItsOwn) {
  AdamW8bit adamw(test_params(3), test_options());
  train(adamw, 0, 2);
  const auto own = adamw.state_tensors();
  const std::map<std::string, at::Tensor> good(own.begin(), own.end());
  const std::string file = "run/optimizer.safetensors";
  auto with = [&](const std::string& key, const at::Tensor& t) {
    auto s = good;
    s[key] = t;
    return s;
  };
  auto without = [&](const std::string& key) {
    auto s = good;
    s.erase(key);
    return s;
  };
  const auto load = [&](const std::map<std::string, at::Tensor>& s) {
    return [&adamw, s, &file] { adamw.load_state_tensors(s, file); };
  };
  expect_error(load(without("exp_avg_sq_absmax.1")),
               "run/optimizer.safetensors: the optimizer state has no 'exp_avg_sq_absmax.1'");
  // 32-bit AdamW state in place of 8-bit codes.
  expect_error(load(with("exp_avg.0", at::zeros({64, 80}))),
               "run/optimizer.safetensors: the optimizer state 'exp_avg.0' is Float; expected Byte (AdamW8bit keeps "
               "uint8 codes for parameters of 4096 elements or more");
  expect_error(load(with("exp_avg_absmax.0", at::zeros({21}))),
               "the optimizer state 'exp_avg_absmax.0' has shape [21] but this run's has shape [20]");
  expect_error(load(with("exp_avg_absmax.2", at::zeros({1}))),
               "run/optimizer.safetensors: unexpected optimizer state tensor 'exp_avg_absmax.2'");
  expect_error(load(without("step")), "run/optimizer.safetensors: the optimizer state has no 'step'");

  // A failed load changed nothing.
  EXPECT_EQ(adamw.steps(), 2);
  const auto after = adamw.state_tensors();
  for (size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(bitwise_equal(after[i].second, own[i].second)) << own[i].first;
}

TEST(AdamW8bit, MakeOptimizerPicksByConfigName) {
  EXPECT_EQ(make_optimizer("adamw_bnb_8bit", test_params(0), {})->name(), "adamw_bnb_8bit");
  EXPECT_EQ(make_optimizer("adamw_torch", test_params(0), {})->name(), "adamw_torch");
  expect_error([] { make_optimizer("lion", test_params(0), {}); },
               "unknown optimizer 'lion'; qtrain implements adamw_torch and adamw_bnb_8bit");
  AdamWOptions beta2;
  beta2.beta2 = 1.0;
  expect_error([&] { AdamW8bit adamw(test_params(0), beta2); }, "AdamW8bit: beta2 is 1; it must be in [0, 1)");
}

}  // namespace
}  // namespace qtrain::engine::train
