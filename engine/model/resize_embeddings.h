// A model's token embeddings (and untied output head) grown or cut to a new vocabulary size, as
// transformers' resize_token_embeddings does when axolotl adds tokens. See Note [Resized
// embeddings].
#pragma once

#include <cstdint>

#include "engine/model/causal_lm.h"

namespace qtrain::engine::model {

// Note [Resized embeddings]
// transformers' resize_token_embeddings(n, mean_resizing=m) (modeling_utils.py, 5.x) replaces the
// [V, H] embeddings with a new nn.Embedding(n, H) in their dtype and copies the first min(V, n)
// rows; an untied head gets a new nn.Linear(H, n) the same way (a tied one is the embeddings).
// The rows past V are then, for each of the two in that order:
//  - m false (axolotl's default, mean_resizing_embeddings: false): the model's _init_weights on
//    the new module, normal(0, initializer_range) over the whole matrix;
//  - m true (transformers' own default): a draw from the multivariate normal with the old rows'
//    mean and 1e-9 times their covariance (float32, Cholesky factor times standard normals), or
//    the mean itself where that covariance is not positive definite (fewer rows than H).
// Constructing the modules draws too (normal(0, 1) for nn.Embedding, kaiming-uniform for
// nn.Linear), so the random numbers any row gets depend on all of these draws. qtrain makes the
// same draws, in the same order and dtype, from a CPU generator seeded with the run's seed: the
// new rows are bitwise those of torch.manual_seed(seed); model.resize_token_embeddings(n, m) on
// the CPU. Cutting (n < V, axolotl's shrink_embeddings) keeps the first n rows.

// Resizes `lm`'s embeddings and head to `rows` rows (its config's vocab_size follows). Before any
// adapter or module trained in full is attached.
void resize_embeddings(CausalLM& lm, int64_t rows, bool mean_resizing, uint64_t seed);

}  // namespace qtrain::engine::model
