// Tiled MLP (axolotl's tiled_mlp): a layer's dense MLP runs forward and backward in chunks of
// tokens, so that what it holds at once, the gate, up and activation outputs [tokens,
// intermediate] and their gradients, grows with the chunk and not with the sequence. Forward runs
// the chunks without recording a graph and keeps only the MLP's input; backward recomputes each
// chunk with grad (the RNG restored, so LoRA dropout draws the forward's masks) and
// back-propagates it, accumulating the LoRA gradients over the chunks.
//
// Each token's output is computed as untiled, row for row; the LoRA gradients are sums over the
// chunks instead of one sum over all tokens, so they differ from the untiled ones by float32
// rounding (tests/engine/schedule/tiled_mlp_test.cpp states the bound). With lora_dropout the
// masks are drawn chunk by chunk: other masks than an untiled run's, from the same distribution.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

#include "engine/model/decoder_layer.h"

namespace qtrain::engine::schedule {

// The chunk size when the config gives none: small enough that the chunk's [tokens,
// intermediate] tensors stay well below a layer's other activations at long sequences, large
// enough that each chunk's matmuls keep a GPU busy.
constexpr int64_t kDefaultTiledMlpTokens = 4096;

// The chunks a call over `tokens` tokens is cut into: `shards` (> 0), or with 0 chunks of at most
// kDefaultTiledMlpTokens tokens; never more chunks than tokens. What TiledMlp runs and the memory
// plan counts.
int64_t tiled_mlp_shards(int64_t shards, int64_t tokens);

class TiledMlp {
 public:
  // `shards` > 0: every MLP call is cut into that many chunks (axolotl's tiled_mlp_num_shards);
  // 0: into chunks of at most kDefaultTiledMlpTokens tokens.
  explicit TiledMlp(int64_t shards = 0);

  // The runner for LayerInputs::mlp_runner. This object must outlive the step's backward.
  model::MlpRunner runner();
  // Forgets the last step's calls. Call before a forward.
  void begin_step();
  // The chunks a call over `tokens` tokens is cut into (tiled_mlp_shards).
  int64_t shards_of(int64_t tokens) const { return tiled_mlp_shards(shards_, tokens); }

 private:
  int64_t shards_;
  std::mutex mutex_;
  std::deque<model::MlpFn> calls_;  // each call's MLP, for its backward (a deque: never moves)
};

struct TiledMlpFunction : public torch::autograd::Function<TiledMlpFunction> {
  // x [..., H]; params: the MLP's trainable tensors; mlp: the MLP (outlives backward).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x,
                                                at::TensorList params,
                                                const model::MlpFn* mlp,
                                                int64_t shards);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out);
};

}  // namespace qtrain::engine::schedule
