// See resize_embeddings.h and Note [Resized embeddings] there.
#include "engine/model/resize_embeddings.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace qtrain::engine::model {
namespace {

// transformers' _init_added_embeddings_weights_with_mean: `added` rows from the multivariate
// normal of `old`'s rows (float32), in `old`'s dtype.
at::Tensor mean_rows(const at::Tensor& old, int64_t added, at::Generator& gen) {
  const auto w = old.to(at::kFloat);
  const auto mean = at::mean(w, {0});
  const auto centered = w - mean;
  const auto covariance = at::matmul(centered.t(), centered) / old.size(0);
  const auto scaled = covariance * 1e-9;
  // torch.distributions' positive_definite check: symmetric (always, at this scale) and a
  // Cholesky factorisation that succeeds.
  if (std::get<1>(at::linalg_cholesky_ex(scaled)).eq(0).all().item<bool>()) {
    const auto scale_tril = at::linalg_cholesky(scaled);
    const auto eps = at::empty({added, old.size(1)}, at::kFloat).normal_(0, 1, gen);
    return (mean + at::matmul(scale_tril, eps.unsqueeze(-1)).squeeze(-1)).to(old.scalar_type());
  }
  return mean.unsqueeze(0).repeat({added, 1}).to(old.scalar_type());
}

// One module's new weight, [rows, H] in `old`'s dtype on the CPU, after the draw that constructing
// it makes (`construct`).
template <typename Construct>
at::Tensor resized(
    const at::Tensor& old, int64_t rows, bool mean_resizing, double init_std, at::Generator& gen, Construct construct) {
  const auto cpu_old = old.to(at::kCPU);
  auto w = at::empty({rows, old.size(1)}, cpu_old.options());
  construct(w);
  const int64_t kept = std::min(rows, old.size(0));
  if (rows > old.size(0)) {
    if (mean_resizing) {
      w.narrow(0, kept, rows - kept).copy_(mean_rows(cpu_old, rows - kept, gen));
    } else {
      w.normal_(0, init_std, gen);
    }
  }
  w.narrow(0, 0, kept).copy_(cpu_old.narrow(0, 0, kept));
  return w.to(old.device());
}

}  // namespace

void resize_embeddings(CausalLM& lm, int64_t rows, bool mean_resizing, uint64_t seed) {
  TORCH_CHECK(rows > 0, "resize_embeddings: ", rows, " rows");
  TORCH_CHECK(!lm.trained_embed_tokens().defined() && !lm.trained_lm_head().defined(),
              "resize_embeddings: the embeddings are resized before modules trained in full are attached");
  if (rows == lm.config().vocab_size) return;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double std = lm.config().initializer_range;
  const int64_t hidden = lm.config().hidden_size;
  // nn.Embedding.reset_parameters: normal_(0, 1).
  const auto embed =
      resized(lm.embed_tokens(), rows, mean_resizing, std, gen, [&](at::Tensor& w) { w.normal_(0, 1, gen); });
  at::Tensor head = embed;
  if (!lm.lm_head().is_same(lm.embed_tokens())) {
    // nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)), computed as torch.nn.init does.
    const double a = std::sqrt(5.0);
    const double gain = std::sqrt(2.0 / (1 + std::pow(a, 2)));
    const double bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(hidden)));
    head = resized(lm.lm_head(), rows, mean_resizing, std, gen, [&](at::Tensor& w) { w.uniform_(-bound, bound, gen); });
  }
  lm.set_embeddings(embed, head);
}

}  // namespace qtrain::engine::model
