// Choosing the next token from a model's logits, as transformers' generate chooses it: the
// repetition penalty, then (when sampling) temperature, top-k, top-p and min-p, then the most
// likely token or a draw. See Note [Sampling].
//
// Note [Sampling]
// transformers (generation/logits_process.py) applies, in this order:
// - RepetitionPenaltyLogitsProcessor: a logit of a token already in the sequence (prompt
//   included) is divided by the penalty where positive and multiplied by it where negative;
// - TemperatureLogitsWarper: logits / temperature;
// - TopKLogitsWarper: logits below the k-th largest become -inf;
// - TopPLogitsWarper: sorted ascending, the tokens whose cumulative probability is at most
//   1 - top_p become -inf, the most likely always kept;
// - MinPLogitsWarper: tokens whose probability is below min_p times the largest become -inf,
//   the most likely always kept;
// and then greedy decoding takes the argmax, sampling draws from softmax(logits). A temperature
// of 0 here means greedy (transformers' do_sample false); the warpers only act when sampling, as
// there. Draws come from a CPU generator seeded by the caller over the probabilities copied to
// the host, so a seed gives the same tokens on every device that computes the same logits.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace qtrain::engine::generate {

struct Sampling {
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: off
  double top_p = 1;        // 1: off
  double min_p = 0;        // 0: off
  double repetition_penalty = 1;

  bool greedy() const { return temperature <= 0; }
};

// The processed logits (float32 [B, V]) of `logits` ([B, V], any float dtype) for rows whose
// sequences so far are `seen` (token ids per row, prompt included, no padding): the penalty and,
// unless greedy, the warpers of Note [Sampling].
at::Tensor process_logits(const at::Tensor& logits,
                          const std::vector<std::vector<int64_t>>& seen,
                          const Sampling& sampling);

// The next token of each row from processed logits: the argmax when greedy, else a draw from
// their softmax with `generator` (a CPU generator). One host read.
std::vector<int64_t> choose_tokens(const at::Tensor& processed, const Sampling& sampling, at::Generator& generator);

// Checks the values (temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1),
// repetition_penalty > 0); errors name the option.
void check_sampling(const Sampling& sampling);

}  // namespace qtrain::engine::generate
