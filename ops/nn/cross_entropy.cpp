// See cross_entropy.h.
#include "ops/nn/cross_entropy.h"

#include <algorithm>

#include <ATen/ATen.h>

namespace qtrain::ops {
namespace {

// One chunk's logits [n, V] in h's dtype, capped when softcap > 0, and the tanh they were capped
// with (undefined without a cap).
std::pair<at::Tensor, at::Tensor> chunk_logits(const at::Tensor& h, const at::Tensor& weight, double softcap) {
  auto logits = at::matmul(h, weight.t());
  if (softcap <= 0) return {logits, at::Tensor()};
  auto t = at::tanh(logits / softcap);
  return {t * softcap, t};
}

}  // namespace

at::Tensor softcap_logits(const at::Tensor& logits, double softcap) {
  return at::tanh(logits / softcap) * softcap;
}

at::Tensor ChunkedCrossEntropyFunction::forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& h,
                                                const at::Tensor& weight,
                                                const at::Tensor& labels,
                                                const std::optional<at::Tensor>& token_weights,
                                                int64_t chunk_tokens,
                                                double softcap) {
  ctx->save_for_backward({h, weight, labels, token_weights.value_or(at::Tensor())});
  ctx->saved_data["chunk"] = chunk_tokens;
  ctx->saved_data["softcap"] = softcap;
  auto total = at::zeros({}, h.options().dtype(at::kFloat));
  for (int64_t s = 0; s < h.size(0); s += chunk_tokens) {
    const int64_t n = std::min(chunk_tokens, h.size(0) - s);
    const auto lab = labels.narrow(0, s, n);
    const auto valid = lab != kIgnoreIndex;
    const auto logits = chunk_logits(h.narrow(0, s, n), weight, softcap).first.to(at::kFloat);  // [n, V]
    const auto target = logits.gather(1, lab.clamp_min(0).unsqueeze(1)).squeeze(1);
    const auto losses = (at::logsumexp(logits, 1) - target) * valid;  // logsumexp: one [n, V] temporary
    total += (token_weights ? losses * token_weights->narrow(0, s, n) : losses).sum();
  }
  return total;
}

torch::autograd::variable_list ChunkedCrossEntropyFunction::backward(torch::autograd::AutogradContext* ctx,
                                                                     torch::autograd::variable_list grad_out) {
  const auto saved = ctx->get_saved_variables();
  const auto& h = saved[0];
  const auto& weight = saved[1];
  const auto& labels = saved[2];
  const auto& token_weights = saved[3];
  const int64_t chunk = ctx->saved_data.at("chunk").toInt();
  const double softcap = ctx->saved_data.at("softcap").toDouble();
  const auto g = grad_out[0].to(at::kFloat);
  const bool need_h = ctx->needs_input_grad(0);
  const bool need_w = ctx->needs_input_grad(1);
  at::Tensor grad_h = need_h ? at::empty_like(h) : at::Tensor();
  at::Tensor grad_w = need_w ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
  for (int64_t s = 0; s < h.size(0); s += chunk) {
    const int64_t n = std::min(chunk, h.size(0) - s);
    const auto lab = labels.narrow(0, s, n);
    const auto valid = (lab != kIgnoreIndex).unsqueeze(1);
    const auto hc = h.narrow(0, s, n);
    // d(sum loss)/d logits = softmax - onehot(target), zero for ignored tokens. Each [n, V]
    // tensor is dropped as soon as it is used and the rest is done in place (Note [Loss chunk
    // size]); the values are those of the out-of-place expressions.
    auto [capped, tanh] = chunk_logits(hc, weight, softcap);
    auto logits = capped.to(at::kFloat);
    capped = at::Tensor();
    auto dlogits = at::softmax(logits, 1);
    logits = at::Tensor();
    dlogits.scatter_add_(1, lab.clamp_min(0).unsqueeze(1), at::full({n, 1}, -1.0f, dlogits.options()));
    dlogits.mul_(valid).mul_(g);
    if (token_weights.defined()) dlogits.mul_(token_weights.narrow(0, s, n).unsqueeze(1));
    if (tanh.defined()) {
      // Through the cap: d(cap * tanh(z / cap))/dz = 1 - tanh^2 (in float32 `to` returns tanh
      // itself, which nothing reads after this).
      auto slope = tanh.to(at::kFloat);
      tanh = at::Tensor();
      dlogits.mul_(slope.square_().neg_().add_(1));
    }
    dlogits = dlogits.to(h.scalar_type());
    if (need_h) grad_h.narrow(0, s, n).copy_(at::matmul(dlogits, weight));
    if (need_w) grad_w.add_(at::matmul(dlogits.t(), hc).to(at::kFloat));
  }
  return {grad_h,
          need_w ? grad_w.to(weight.scalar_type()) : at::Tensor(),
          at::Tensor(),
          at::Tensor(),
          at::Tensor(),
          at::Tensor()};
}

int64_t cross_entropy_bytes_per_logit(at::ScalarType dtype, bool softcap) {
  const auto s = static_cast<int64_t>(c10::elementSize(dtype));
  return 8 + (softcap ? s : 0);
}

int64_t cross_entropy_chunk_tokens(int64_t vocab, at::ScalarType dtype, bool softcap) {
  TORCH_CHECK(vocab > 0, "cross_entropy_chunk_tokens: the vocabulary must be positive, got ", vocab);
  const int64_t fit = kCrossEntropyChunkBytes / (vocab * cross_entropy_bytes_per_logit(dtype, softcap));
  return std::clamp<int64_t>(fit / 8 * 8, 8, kCrossEntropyChunkTokens);
}

at::Tensor chunked_cross_entropy_sum(const at::Tensor& h,
                                     const at::Tensor& weight,
                                     const at::Tensor& labels,
                                     int64_t chunk_tokens,
                                     std::optional<double> softcap,
                                     const at::Tensor& token_weights) {
  TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1),
              "chunked_cross_entropy: h ",
              h.sizes(),
              " and weight ",
              weight.sizes(),
              " must be [N, H] and [V, H]");
  TORCH_CHECK(labels.dim() == 1 && labels.size(0) == h.size(0) && labels.scalar_type() == at::kLong,
              "chunked_cross_entropy: labels must be int64 [",
              h.size(0),
              "], got ",
              labels.scalar_type(),
              " ",
              labels.sizes());
  TORCH_CHECK(
      !token_weights.defined() || (token_weights.dim() == 1 && token_weights.size(0) == h.size(0) &&
                                   token_weights.scalar_type() == at::kFloat && token_weights.device() == h.device()),
      "chunked_cross_entropy: token_weights must be float32 [",
      h.size(0),
      "] on ",
      h.device());
  TORCH_CHECK(chunk_tokens > 0, "chunked_cross_entropy: chunk_tokens must be positive, got ", chunk_tokens);
  TORCH_CHECK(!softcap || *softcap > 0, "chunked_cross_entropy: softcap must be positive, got ", softcap.value_or(0));
  // Checked where the labels are host data; on a device the check would make the host wait for
  // it (Note [Host reads]), and the data path has checked them against the vocabulary already.
  const auto bad = !labels.is_cpu()
                       ? at::Tensor()
                       : (labels != kIgnoreIndex).logical_and((labels < 0).logical_or(labels >= weight.size(0)));
  TORCH_CHECK(!bad.defined() || !bad.any().item<bool>(),
              "chunked_cross_entropy: a label is outside [0, ",
              weight.size(0),
              ") and is not the ignore index ",
              kIgnoreIndex,
              " (the dataset and the model disagree on the vocabulary)");
  return ChunkedCrossEntropyFunction::apply(h,
                                            weight,
                                            labels,
                                            token_weights.defined() ? std::optional(token_weights) : std::nullopt,
                                            chunk_tokens,
                                            softcap.value_or(0.0));
}

}  // namespace qtrain::ops
