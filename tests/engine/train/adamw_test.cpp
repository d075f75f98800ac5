// AdamW: bitwise parity with torch.optim.AdamW over clipped, scheduled steps (the whole
// optimizer step of the Trainer: clip_grad_norm_, AdamW, LambdaLR), a save/load of the state
// that resumes exactly, and the errors for options and state that do not fit.
#include "engine/train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <filesystem>

#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/train/clip_grad.h"
#include "engine/train/lr_schedule.h"
#include "tests/expect_error.h"
#include "tests/reference.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using test::bitwise_equal;
using test::expect_error;

// The tensors of `optim_reference.py adamw`, made once per process (the script takes seconds).
const test::ScriptTensors& adamw_reference() {
  static const test::ScriptTensors reference = test::run_reference_script("optim_reference.py", "adamw");
  return reference;
}

const at::Tensor& ref_tensor(const test::ScriptTensors& ref, const std::string& name) {
  const auto it = ref.tensors.find(name);
  TORCH_CHECK(it != ref.tensors.end(), "optim_reference.py wrote no tensor '", name, "'");
  return it->second;
}

std::string index_name(const std::string& prefix, int64_t a) {
  return prefix + "." + std::to_string(a);
}
std::string index_name(const std::string& prefix, int64_t a, int64_t b) {
  return index_name(prefix, a) + "." + std::to_string(b);
}

uint64_t bits(double x) {
  return std::bit_cast<uint64_t>(x);
}
uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

TEST(AdamWParity, TwentyFiveClippedScheduledStepsEqualTorchBitwise) {
  const auto& ref = adamw_reference();
  if (ref.skipped) GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
  ASSERT_TRUE(ref.error.empty()) << ref.error;

  // The script's settings: three parameters, betas (0.9, 0.95), weight decay 0.1, cosine
  // schedule with 3 warmup steps over 25, gradients clipped to norm 1.
  constexpr int64_t kParams = 3;
  constexpr int64_t kSteps = 25;
  std::vector<at::Tensor> params;
  for (int64_t i = 0; i < kParams; ++i) {
    params.push_back(ref_tensor(ref, index_name("init", i)).clone().requires_grad_(true));
  }
  AdamWOptions options;
  options.lr = 1e-3;
  options.beta1 = 0.9;
  options.beta2 = 0.95;
  options.eps = 1e-8;
  options.weight_decay = 0.1;
  AdamW adamw(params, options);
  const LrSchedule schedule{LrScheduleType::cosine, options.lr, 3, kSteps};
  const auto lrs = ref_tensor(ref, "lrs");
  const auto norms = ref_tensor(ref, "norms");
  ASSERT_EQ(lrs.numel(), kSteps);
  ASSERT_EQ(norms.numel(), kSteps);

  int64_t clipped = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const double lr = schedule.lr_at(step);
    EXPECT_EQ(bits(lr), bits(lrs[step].item<double>()))
        << "step " << step << ": " << lr << " vs " << lrs[step].item<double>();
    for (int64_t i = 0; i < kParams; ++i)
      params[i].mutable_grad() = ref_tensor(ref, index_name("grad", step, i)).clone();
    const double norm = clip_grad_norm(params, 1.0).item<double>();
    EXPECT_EQ(bits(static_cast<float>(norm)), bits(norms[step].item<float>()))
        << "step " << step << ": " << norm << " vs " << norms[step].item<float>();
    // The norm is a float32 value; the double carries it exactly.
    EXPECT_EQ(static_cast<double>(static_cast<float>(norm)), norm);
    clipped += norm > 1.0;
    adamw.step(lr);
    for (int64_t i = 0; i < kParams; ++i) {
      ASSERT_TRUE(bitwise_equal(params[i].detach(), ref_tensor(ref, index_name("param", step, i))))
          << "parameter " << i << " differs from torch after step " << step << " ("
          << test::count_bitwise_diff(params[i].detach(), ref_tensor(ref, index_name("param", step, i)))
          << " elements)";
    }
  }
  // The reference covers both sides of clipping.
  EXPECT_GT(clipped, 0);
  EXPECT_LT(clipped, kSteps);

  EXPECT_EQ(adamw.steps(), kSteps);
  EXPECT_EQ(ref_tensor(ref, "step").item<double>(), static_cast<double>(kSteps));
  const auto state = adamw.state_tensors();
  const std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  for (int64_t i = 0; i < kParams; ++i) {
    EXPECT_TRUE(bitwise_equal(params[i].detach(), ref_tensor(ref, index_name("final", i)))) << i;
    for (const char* key : {"exp_avg", "exp_avg_sq"}) {
      EXPECT_TRUE(bitwise_equal(by_name.at(index_name(key, i)), ref_tensor(ref, index_name(key, i))))
          << key << "." << i;
    }
  }
}

// Deterministic test data: parameters [4, 8], [16], [3, 3, 3] and a gradient per step.
std::vector<at::Tensor> test_params(uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (const auto& shape : {std::vector<int64_t>{4, 8}, {16}, {3, 3, 3}}) {
    out.push_back(at::randn(shape, gen, at::kFloat).requires_grad_(true));
  }
  return out;
}

void set_test_grads(const std::vector<at::Tensor>& params, int64_t step) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  for (const auto& p : params) p.mutable_grad() = at::randn(p.sizes(), gen, at::kFloat);
}

AdamWOptions test_options() {
  AdamWOptions options;
  options.lr = 2e-3;
  options.beta2 = 0.95;
  options.weight_decay = 0.05;
  return options;
}

// The trainer's optimizer step: clip, update with the scheduled lr, clear the grads.
void train(AdamW& adamw, const LrSchedule& schedule, int64_t from, int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    set_test_grads(adamw.params(), step);
    clip_grad_norm(adamw.params(), 1.0);
    adamw.step(schedule.lr_at(step));
    adamw.zero_grad();
  }
}

TEST(AdamW, ResumingFromSavedStateEqualsUninterruptedTrainingBitwise) {
  const LrSchedule schedule{LrScheduleType::cosine, 2e-3, 3, 20};
  AdamW uninterrupted(test_params(7), test_options());
  train(uninterrupted, schedule, 0, 20);

  AdamW first(test_params(7), test_options());
  train(first, schedule, 0, 10);
  // Through a file, as a run-state checkpoint does it.
  const fs::path dir = fs::temp_directory_path() / ("qtrain_adamw_state_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  io::safetensors_save(dir / "optimizer.safetensors", first.state_tensors());
  const auto loaded = io::safetensors_load(dir / "optimizer.safetensors");
  std::vector<at::Tensor> params;
  for (const auto& p : first.params()) params.push_back(p.detach().clone().requires_grad_(true));
  AdamW resumed(params, test_options());
  resumed.load_state_tensors(loaded, (dir / "optimizer.safetensors").string());
  qtrain::engine::io::remove_tree(dir);
  EXPECT_EQ(resumed.steps(), 10);
  train(resumed, schedule, 10, 20);

  EXPECT_EQ(resumed.steps(), 20);
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

TEST(AdamW, StateTensorsAreNamedTypedAndShapedForSaving) {
  AdamW adamw(test_params(1), test_options());
  const auto state = adamw.state_tensors();
  ASSERT_EQ(state.size(), 7u);
  EXPECT_EQ(state[0].first, "step");
  EXPECT_EQ(state[0].second.scalar_type(), at::kLong);
  EXPECT_EQ(state[0].second.dim(), 0);
  EXPECT_EQ(state[0].second.item<int64_t>(), 0);
  EXPECT_EQ(state[1].first, "exp_avg.0");
  EXPECT_EQ(state[2].first, "exp_avg_sq.0");
  EXPECT_EQ(state[6].first, "exp_avg_sq.2");
  EXPECT_EQ(state[5].second.sizes(), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(state[5].second.scalar_type(), at::kFloat);
  EXPECT_EQ(state[5].second.count_nonzero().item<int64_t>(), 0);
}

// A parameter exempt from weight decay (a norm trained in full, as transformers' Trainer exempts
// them) steps exactly as under weight_decay 0, in both optimizers; the others keep their decay.
TEST(AdamW, DecayExemptParametersStepAsWithoutDecayBitwise) {
  for (const std::string name : {"adamw_torch", "adamw_bnb_8bit"}) {
    SCOPED_TRACE(name);
    auto without = test_options();
    without.weight_decay = 0;
    auto exempt = make_optimizer(name, test_params(3), test_options());
    exempt->set_decay_exempt({false, true, false});
    auto decayed = make_optimizer(name, test_params(3), test_options());
    auto plain = make_optimizer(name, test_params(3), without);
    for (int64_t step = 0; step < 3; ++step) {
      for (auto* o : {exempt.get(), decayed.get(), plain.get()}) {
        set_test_grads(o->params(), step);
        o->step(1e-2);
      }
    }
    EXPECT_TRUE(bitwise_equal(exempt->params()[1].detach(), plain->params()[1].detach()));
    EXPECT_FALSE(bitwise_equal(exempt->params()[1].detach(), decayed->params()[1].detach()));
    EXPECT_TRUE(bitwise_equal(exempt->params()[0].detach(), decayed->params()[0].detach()));
    expect_error([&] { exempt->set_decay_exempt({true}); }, "set_decay_exempt: 1 flags for 3 parameters");
  }
}

// The optimizers as the trainer runs them: "adamw_torch" (the CPU's multi-tensor kernel),
// "fused" (AdamW with CUDA's kernel, which torch has on the CPU too) and "adamw_bnb_8bit".
std::unique_ptr<Optimizer> optimizer_named(const std::string& name, std::vector<at::Tensor> params) {
  if (name == "fused") return std::make_unique<AdamW>(std::move(params), test_options(), AdamWKernel::fused);
  return make_optimizer(name, std::move(params), test_options());
}

// The test parameters and one of 5120 elements, which AdamW8bit keeps in 8 bits.
std::vector<at::Tensor> params_with_an_8bit_one(uint64_t seed) {
  auto params = test_params(seed);
  params.push_back(at::randn({64, 80}, at::detail::createCPUGenerator(seed + 1), at::kFloat).requires_grad_(true));
  return params;
}

// A step whose gradients are not finite, decided on the device (Note [Steps decided on the device]
// in trainer.cpp): `apply` false leaves the parameters and the state as they were, and once the
// step is taken back (step_skipped) the run equals one that never saw it, bit for bit, in each
// optimizer. What the trainer does: the update with the finiteness as `apply`, read later.
TEST(AdamW, AStepNotAppliedOnTheDeviceLeavesNoTrace) {
  for (const std::string name : {"adamw_torch", "fused", "adamw_bnb_8bit"}) {
    SCOPED_TRACE(name);
    auto skipping = optimizer_named(name, params_with_an_8bit_one(3));
    auto clean = optimizer_named(name, params_with_an_8bit_one(3));
    for (int64_t step = 0; step < 6; ++step) {
      set_test_grads(skipping->params(), step);
      if (step == 2) skipping->params()[3].mutable_grad()[5][7] = NAN;
      const auto apply = grads_finite(skipping->params());
      const auto before = skipping->state_tensors();
      const auto params_before = skipping->params()[3].detach().clone();
      skipping->step(1e-2, apply);
      skipping->zero_grad();
      if (step == 2) {
        EXPECT_TRUE(bitwise_equal(skipping->params()[3].detach(), params_before));
        skipping->step_skipped();
        continue;
      }
      set_test_grads(clean->params(), step);
      clean->step(1e-2);
      clean->zero_grad();
    }
    EXPECT_EQ(skipping->steps(), 5);
    EXPECT_EQ(clean->steps(), 5);
    for (size_t i = 0; i < clean->params().size(); ++i) {
      EXPECT_TRUE(bitwise_equal(skipping->params()[i].detach(), clean->params()[i].detach())) << "parameter " << i;
    }
    const auto a = skipping->state_tensors(), b = clean->state_tensors();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// The fused kernel (CUDA's) computes the multi-tensor kernel's update in another order: over 20
// steps, with LoRA+ learning-rate scales and a parameter exempt from decay (so three groups), the
// parameters stay within float32 rounding of it (2e-6 relative to the largest change: a few
// roundings per step, accumulated; a wrong bias correction or decay is off by percents).
TEST(AdamW, FusedKernelFollowsTheMultiTensorKernel) {
  AdamW multi(test_params(9), test_options(), AdamWKernel::multi_tensor);
  AdamW fused(test_params(9), test_options(), AdamWKernel::fused);
  const auto start = test_params(9);
  for (auto* o : {&multi, &fused}) {
    o->set_lr_scales({1.0, 16.0, 1.0});
    o->set_decay_exempt({false, false, true});
  }
  for (int64_t step = 0; step < 20; ++step) {
    for (auto* o : {&multi, &fused}) {
      set_test_grads(o->params(), step);
      o->step(1e-2);
    }
  }
  for (size_t i = 0; i < start.size(); ++i) {
    const auto change = (multi.params()[i] - start[i]).abs().max().item<double>();
    const auto diff = (multi.params()[i] - fused.params()[i]).abs().max().item<double>();
    EXPECT_LT(diff, 2e-6 * change) << "parameter " << i << ": changed by " << change;
  }
}

TEST(AdamW, ParametersWithoutGradAreLeftAloneAndZeroGradUndefinesGrads) {
  auto params = test_params(2);
  const auto before = params[1].detach().clone();
  AdamW adamw(params, test_options());
  set_test_grads(params, 0);
  params[1].mutable_grad() = at::Tensor();
  const auto before0 = params[0].detach().clone();
  adamw.step(1e-3);
  EXPECT_TRUE(bitwise_equal(params[1].detach(), before));
  EXPECT_FALSE(bitwise_equal(params[0].detach(), before0));
  // The update is not recorded by autograd: the parameters stay leaves.
  EXPECT_TRUE(params[0].is_leaf());
  EXPECT_FALSE(params[0].grad_fn());
  adamw.zero_grad();
  for (const auto& p : params) EXPECT_FALSE(p.grad().defined());
  expect_error([&] { adamw.step(1e-3); }, "none of the 3 parameters has a grad");
}

TEST(AdamW, LoadRejectsStateThatDoesNotFitAndKeepsItsOwn) {
  AdamW adamw(test_params(3), test_options());
  train(adamw, LrSchedule{LrScheduleType::constant, 1e-3, 0, 5}, 0, 2);
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
  expect_error(load(without("exp_avg_sq.1")),
               "run/optimizer.safetensors: the optimizer state has no 'exp_avg_sq.1'; expected 'step', "
               "'exp_avg.<i>' and 'exp_avg_sq.<i>' for i = 0 .. 2 (the optimizer has 3 parameters)");
  expect_error(load(without("step")), "run/optimizer.safetensors: the optimizer state has no 'step'");
  expect_error(load(with("exp_avg.0", at::zeros({8, 4}))),
               "run/optimizer.safetensors: the optimizer state 'exp_avg.0' has shape [8, 4] but parameter 0 has "
               "shape [4, 8]");
  expect_error(load(with("exp_avg_sq.2", at::zeros({3, 3, 3}, at::kHalf))),
               "the optimizer state 'exp_avg_sq.2' is Half; expected Float (float32)");
  expect_error(load(with("exp_avg.3", at::zeros({2}))),
               "run/optimizer.safetensors: unexpected optimizer state tensor 'exp_avg.3'");
  expect_error(load(with("step", at::scalar_tensor(2.0, at::kFloat))),
               "the optimizer state 'step' is Float []; expected an int64 scalar");
  expect_error(load(with("step", at::full({1}, 2, at::kLong))), "the optimizer state 'step' is Long [1]");
  expect_error(load(with("step", at::scalar_tensor(-1, at::kLong))), "the optimizer state 'step' is -1");

  // A failed load changed nothing.
  EXPECT_EQ(adamw.steps(), 2);
  const auto after = adamw.state_tensors();
  for (size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(bitwise_equal(after[i].second, own[i].second)) << own[i].first;
}

TEST(AdamW, RejectsBadOptionsAndParameters) {
  const auto make = [](AdamWOptions options, std::vector<at::Tensor> params) {
    return [options, params] { AdamW adamw(params, options); };
  };
  AdamWOptions beta1;
  beta1.beta1 = 1.0;
  expect_error(make(beta1, test_params(0)), "AdamW: beta1 is 1; it must be in [0, 1)");
  AdamWOptions lr;
  lr.lr = -1e-4;
  expect_error(make(lr, test_params(0)), "AdamW: lr is -0.0001; it must be in [0, inf]");
  AdamWOptions wd;
  wd.weight_decay = NAN;
  expect_error(make(wd, test_params(0)), "AdamW: weight_decay is nan");
  expect_error(make({}, {}), "AdamW: no parameters to optimize");
  expect_error(make({}, {at::zeros({2}, at::kBFloat16)}), "AdamW: parameter 0 is BFloat16; qtrain trains");
  const auto p = at::zeros({2});
  expect_error(make({}, {p, p}), "AdamW: parameter 1 is given twice");
  AdamW adamw(test_params(0), {});
  set_test_grads(adamw.params(), 0);
  expect_error([&] { adamw.step(NAN); }, "AdamW::step: lr is nan; it must be finite and >= 0");
}

}  // namespace
}  // namespace qtrain::engine::train
