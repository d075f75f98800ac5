// See sampling.h and Note [Sampling] there.
#include "engine/generate/sampling.h"

#include <limits>

#include <ATen/ATen.h>

#include "ops/host_read.h"

namespace qtrain::engine::generate {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

at::Tensor repetition_penalty(at::Tensor scores, const std::vector<std::vector<int64_t>>& seen, double penalty) {
  for (int64_t r = 0; r < scores.size(0); ++r) {
    if (seen[r].empty()) continue;
    const auto ids = at::tensor(seen[r], at::kLong).to(scores.device());
    auto row = scores[r];
    const auto score = row.index_select(0, ids);
    row.index_copy_(0, ids, at::where(score < 0, score * penalty, score / penalty));
  }
  return scores;
}

at::Tensor top_k(const at::Tensor& scores, int64_t k) {
  if (k <= 0 || k >= scores.size(-1)) return scores;
  const auto kth = std::get<0>(at::topk(scores, k)).narrow(-1, k - 1, 1);
  return scores.masked_fill(scores < kth, kMinusInf);
}

at::Tensor top_p(const at::Tensor& scores, double p) {
  if (p >= 1) return scores;
  const auto [sorted, order] = at::sort(scores, /*dim=*/-1, /*descending=*/false);
  auto remove = sorted.softmax(-1).cumsum(-1) <= (1 - p);
  remove.narrow(-1, remove.size(-1) - 1, 1).fill_(false);
  return scores.masked_fill(remove.scatter(1, order, remove), kMinusInf);
}

at::Tensor min_p(const at::Tensor& scores, double m) {
  if (m <= 0) return scores;
  const auto probs = scores.softmax(-1);
  const auto remove = probs < probs.amax(-1, /*keepdim=*/true) * m;
  const auto order = at::argsort(scores, /*dim=*/-1, /*descending=*/true);
  auto sorted_remove = remove.gather(1, order);
  sorted_remove.narrow(-1, 0, 1).fill_(false);
  return scores.masked_fill(sorted_remove.scatter(1, order, sorted_remove), kMinusInf);
}

}  // namespace

void check_sampling(const Sampling& s) {
  TORCH_CHECK(s.temperature >= 0, "--temperature is ", s.temperature, ": use 0 (greedy) or a positive value");
  TORCH_CHECK(s.top_k >= 0, "--top-k is ", s.top_k, ": use 0 (off) or a positive count");
  TORCH_CHECK(s.top_p > 0 && s.top_p <= 1, "--top-p is ", s.top_p, ": use a value in (0, 1] (1: off)");
  TORCH_CHECK(s.min_p >= 0 && s.min_p < 1, "--min-p is ", s.min_p, ": use a value in [0, 1) (0: off)");
  TORCH_CHECK(
      s.repetition_penalty > 0, "--repetition-penalty is ", s.repetition_penalty, ": use a positive value (1: off)");
}

at::Tensor process_logits(const at::Tensor& logits, const std::vector<std::vector<int64_t>>& seen, const Sampling& s) {
  TORCH_CHECK(logits.dim() == 2 && static_cast<size_t>(logits.size(0)) == seen.size(),
              "process_logits: logits must be [B, V] with one sequence per row");
  auto scores = logits.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  if (s.repetition_penalty != 1) scores = repetition_penalty(scores, seen, s.repetition_penalty);
  if (s.greedy()) return scores;
  scores = scores / s.temperature;
  return min_p(top_p(top_k(scores, s.top_k), s.top_p), s.min_p);
}

std::vector<int64_t> choose_tokens(const at::Tensor& processed, const Sampling& s, at::Generator& generator) {
  const auto chosen =
      s.greedy() ? ops::read_to_host(processed.argmax(-1), "the next tokens")
                 : at::multinomial(
                       ops::read_to_host(processed.softmax(-1), "the next tokens' probabilities"), 1, false, generator)
                       .squeeze(1);
  const auto host = chosen.contiguous();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

}  // namespace qtrain::engine::generate
