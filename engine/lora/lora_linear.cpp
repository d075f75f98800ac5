// LoRA init, forward delta and merge; see lora_linear.h and Note [LoRA numerics] there.
#include "engine/lora/lora_linear.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace qtrain::engine::lora {

namespace {

// torch.nn.init.kaiming_uniform_(w, a=sqrt(5)) with fan_in = in_features, step by step in double
// as torch/nn/init.py does it (calculate_gain("leaky_relu", a), then std, then bound), so the
// float the uniform kernel receives is the one Python computes. Mathematically 1/sqrt(fan_in).
double kaiming_uniform_bound(int64_t fan_in) {
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1 + std::pow(a, 2)));
  const double std = gain / std::sqrt(static_cast<double>(fan_in));
  return std::sqrt(3.0) * std;
}

void check_adapter(const LoraAdapter& adapter) {
  TORCH_CHECK(adapter.a.defined() && adapter.b.defined(), "LoRA adapter has an undefined A or B weight");
  TORCH_CHECK(adapter.a.dim() == 2 && adapter.b.dim() == 2 && adapter.b.size(1) == adapter.a.size(0),
              "LoRA adapter shapes do not fit: A ",
              adapter.a.sizes(),
              " must be [r, in] and B ",
              adapter.b.sizes(),
              " must be [out, r] with the same r");
}

// W + scaling * (B @ A) on W's device, the adapter detached (PEFT's get_delta_weight added to the
// weight): what a merge writes, and what DoRA takes the row norms of.
at::Tensor updated_weight(const at::Tensor& w, const LoraAdapter& adapter) {
  const auto delta = at::matmul(adapter.b.detach().to(w.device()), adapter.a.detach().to(w.device())) * adapter.scaling;
  return w + delta;
}

}  // namespace

LoraAdapter lora_init(
    int64_t in_features, int64_t out_features, const LoraConfig& config, at::Generator gen, at::Device device) {
  config.validate("LoRA config");
  TORCH_CHECK(in_features > 0 && out_features > 0,
              "lora_init: layer sizes in=",
              in_features,
              " out=",
              out_features,
              " must be positive");
  TORCH_CHECK(gen.defined() && gen.device().is_cpu(),
              "lora_init draws A on the CPU so that its values do not depend on the device; pass a CPU generator");
  const double bound = kaiming_uniform_bound(in_features);
  at::Tensor a = at::empty({config.r, in_features}, at::kFloat).uniform_(-bound, bound, gen);
  at::Tensor b = at::zeros({out_features, config.r}, at::kFloat);
  return LoraAdapter{.a = a.to(device).set_requires_grad(true),
                     .b = b.to(device).set_requires_grad(true),
                     .scaling = config.scaling(),
                     .dropout = config.dropout};
}

LoraAdapter lora_init(
    int64_t in_features, int64_t out_features, const LoraConfig& config, uint64_t seed, at::Device device) {
  return lora_init(in_features, out_features, config, at::make_generator<at::CPUGeneratorImpl>(seed), device);
}

at::Tensor lora_delta(const at::Tensor& x, const LoraAdapter& adapter, bool training) {
  check_adapter(adapter);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == adapter.in_features(),
              "lora_delta: input has shape ",
              x.sizes(),
              " but the adapter's A is ",
              adapter.a.sizes(),
              "; the last input dimension must be in_features = ",
              adapter.in_features());
  TORCH_CHECK(x.device() == adapter.a.device() && x.device() == adapter.b.device(),
              "lora_delta: input is on ",
              x.device(),
              " but the adapter is on ",
              adapter.a.device(),
              "; move the adapter to the input's device");
  // PEFT's _cast_input_dtype: the LoRA path runs in the adapter's dtype (fp32). Dropout comes
  // after the cast, as in PEFT, and p == 0 is nn.Identity there: no mask, no RNG draw.
  at::Tensor h = x.to(adapter.a.scalar_type());
  if (training && adapter.dropout > 0) {
    h = at::dropout(h, adapter.dropout, /*train=*/true);
  }
  // Same op order as lora_B(lora_A(h)) * scaling, so the fp32 result matches PEFT bit for bit.
  at::Tensor delta = at::linear(at::linear(h, adapter.a), adapter.b) * adapter.scaling;
  return delta.to(x.scalar_type());
}

at::Tensor dora_magnitude(const at::Tensor& base_w, const LoraAdapter& adapter) {
  check_adapter(adapter);
  at::NoGradGuard no_grad;
  const auto norm = at::linalg_vector_norm(updated_weight(base_w.to(adapter.a.device()), adapter), 2, {1});
  return norm.to(at::kFloat).detach().set_requires_grad(true);
}

at::Tensor dora_output(const at::Tensor& x,
                       const at::Tensor& base_out,
                       const at::Tensor& base_w,
                       const std::optional<at::Tensor>& bias,
                       const LoraAdapter& adapter,
                       bool training) {
  check_adapter(adapter);
  TORCH_CHECK(adapter.magnitude.defined() && adapter.magnitude.dim() == 1 &&
                  adapter.magnitude.size(0) == adapter.out_features(),
              "dora_output: the DoRA magnitude must be [out_features] = [",
              adapter.out_features(),
              "]");
  const auto fp32 = adapter.a.scalar_type();
  at::Tensor h = x.to(fp32);
  const bool dropped = training && adapter.dropout > 0;
  if (dropped) h = at::dropout(h, adapter.dropout, /*train=*/true);
  const auto w = base_w.to(fp32);
  const auto norm = at::linalg_vector_norm(updated_weight(w, adapter), 2, {1}).detach();
  const auto scale = (adapter.magnitude / norm).view({1, -1});
  const auto lora_result = at::linear(at::linear(h, adapter.a), adapter.b);
  const auto base = dropped ? at::linear(h, w) : bias ? base_out - *bias : base_out;
  const auto dora = (scale - 1) * base + scale * lora_result * adapter.scaling;
  return (base_out + dora).to(x.scalar_type());
}

at::Tensor lora_merged_weight(const at::Tensor& base_w, const LoraAdapter& adapter) {
  check_adapter(adapter);
  TORCH_CHECK(base_w.dim() == 2 && base_w.size(0) == adapter.out_features() && base_w.size(1) == adapter.in_features(),
              "lora_merged_weight: base weight has shape ",
              base_w.sizes(),
              " but the adapter is for [out, in] = [",
              adapter.out_features(),
              ", ",
              adapter.in_features(),
              "]");
  TORCH_CHECK(base_w.is_floating_point(),
              "lora_merged_weight: base weight has dtype ",
              base_w.scalar_type(),
              "; dequantize a quantized weight before merging");
  // PEFT's get_delta_weight ((B @ A) * scaling in the adapter's dtype), then `weight += delta`,
  // which adds in the promoted dtype and rounds once to the weight's dtype. (safe_merge=True
  // rounds the delta to the weight's dtype first.)
  const auto merged = updated_weight(base_w.detach(), adapter);
  if (!adapter.magnitude.defined()) return merged.to(base_w.scalar_type());
  // DoRA (PEFT's DoraLinearVariant.merge_safe): the norm of W + delta per row, then each row of
  // W + delta scaled to the magnitude.
  const auto norm = at::linalg_vector_norm(merged, 2, {1});
  const auto factor = adapter.magnitude.detach().to(base_w.device()) / norm;
  return (factor.view({-1, 1}) * merged).to(base_w.scalar_type());
}

}  // namespace qtrain::engine::lora
