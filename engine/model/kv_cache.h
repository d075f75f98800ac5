// The keys and values of the tokens a model has already read, kept per layer, so that decoding
// computes each new token's layer outputs only. See Note [KV cache].
//
// Note [KV cache]
// Each layer appends its new tokens' keys and values as attention reads them (after the k and v
// norms and rope; Gemma 4's k = v layers keep the normed k_proj output as values), [B, kv_heads,
// T, head_dim] in the compute dtype, and attends from the new queries over everything held. A
// batch of prompts is left-padded to one length: `valid` marks the padding, which no query sees
// (a padding query sees itself only, so softmax stays finite; its output is never read). A
// token's position (its rope angle) is the number of valid tokens before it in its row, as
// transformers' generate derives position_ids from the attention mask, so a prompt's tokens get
// the positions they have alone and padding changes no result. Sliding-window layers keep every
// key and see the last `sliding_window` (cache indices and positions differ by the row's padding
// only, which lies before every valid key). Rows that have finished keep decoding a token that
// is ignored, as transformers' generate does; nothing of theirs reaches another row.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "engine/model/model_config.h"

namespace qtrain::engine::model {

// The bytes a KvCache holds for `rows` sequences of `tokens` tokens (prompt, padding and
// completion) of a model of `config` in `dtype`: keys and values of every layer, each
// kv_heads x head_dim per token (Gemma 4's full-attention layers with their own).
int64_t kv_cache_bytes(const ModelConfig& config, int64_t rows, int64_t tokens, at::ScalarType dtype);

class KvCache {
 public:
  explicit KvCache(int64_t num_layers) : keys_(num_layers), values_(num_layers) {}

  // Starts a forward over new tokens: `valid` is bool [B, Tq] on the model's device (false on
  // left padding). Returns their positions, int64 [B, Tq] (padding gets 0).
  at::Tensor begin(const at::Tensor& valid);
  // Appends layer `layer`'s keys and values of the new tokens ([B, kv_heads, Tq, d]) and returns
  // all it holds for that layer, [B, kv_heads, Tk, d].
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // bool [B, 1, Tq, Tk]: the keys each new query sees (for a layer with `window`, the last
  // `window` of them). Computed once per forward and window.
  const at::Tensor& visible(std::optional<int64_t> window);

  // Tokens held per row (padding included) once the current forward's are appended.
  int64_t length() const { return valid_.defined() ? valid_.size(1) : 0; }
  // Bytes of keys and values held.
  int64_t bytes() const;

 private:
  std::vector<at::Tensor> keys_, values_;
  at::Tensor valid_;          // bool [B, Tk]
  at::Tensor next_position_;  // int64 [B]
  int64_t new_tokens_ = 0;
  std::map<int64_t, at::Tensor> visible_;  // this forward's masks by window (-1: none)
};

}  // namespace qtrain::engine::model
