// See kv_cache.h and Note [KV cache] there.
#include "engine/model/kv_cache.h"

#include <ATen/ATen.h>

namespace qtrain::engine::model {

at::Tensor KvCache::begin(const at::Tensor& valid) {
  TORCH_CHECK(valid.dim() == 2 && valid.scalar_type() == at::kBool, "KvCache::begin: valid must be bool [B, T]");
  TORCH_CHECK(!valid_.defined() || valid.size(0) == valid_.size(0),
              "KvCache::begin: the cache holds ",
              valid_.defined() ? valid_.size(0) : 0,
              " rows, the new tokens have ",
              valid.size(0));
  if (!valid_.defined()) next_position_ = at::zeros({valid.size(0)}, valid.options().dtype(at::kLong));
  const auto counted = valid.to(at::kLong).cumsum(1);
  const auto positions = (next_position_.unsqueeze(1) + counted - 1).clamp_min(0);
  next_position_ = next_position_ + counted.select(1, -1);
  valid_ = valid_.defined() ? at::cat({valid_, valid}, 1) : valid;
  new_tokens_ = valid.size(1);
  visible_.clear();
  return positions;
}

std::pair<at::Tensor, at::Tensor> KvCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(layer >= 0 && layer < static_cast<int64_t>(keys_.size()), "KvCache::append: no layer ", layer);
  TORCH_CHECK(k.size(2) == new_tokens_ && v.size(2) == new_tokens_,
              "KvCache::append: layer ",
              layer,
              " brings ",
              k.size(2),
              " tokens, the forward began with ",
              new_tokens_);
  auto& keys = keys_[layer];
  auto& values = values_[layer];
  keys = keys.defined() ? at::cat({keys, k}, 2) : k;
  values = values.defined() ? at::cat({values, v}, 2) : v;
  TORCH_CHECK(keys.size(2) == length(), "KvCache::append: layer ", layer, " was skipped in an earlier forward");
  return {keys, values};
}

const at::Tensor& KvCache::visible(std::optional<int64_t> window) {
  const int64_t key = window.value_or(-1);
  if (auto it = visible_.find(key); it != visible_.end()) return it->second;
  const int64_t tk = length(), tq = new_tokens_;
  const auto options = valid_.options().dtype(at::kLong);
  const auto i = at::arange(tk - tq, tk, options).unsqueeze(1);  // the new queries' cache indices
  const auto j = at::arange(tk, options).unsqueeze(0);
  auto seen = j <= i;  // [Tq, Tk]
  if (window) seen = seen.logical_and(i - j < *window);
  auto mask = seen.unsqueeze(0).logical_and(valid_.unsqueeze(1)).logical_or((i == j).unsqueeze(0));
  return visible_[key] = mask.unsqueeze(1);
}

int64_t kv_cache_bytes(const ModelConfig& config, int64_t rows, int64_t tokens, at::ScalarType dtype) {
  int64_t per_token = 0;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const auto a = config.attention(layer);
    per_token += 2 * a.num_kv_heads * a.head_dim;
  }
  return per_token * rows * tokens * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto* held : {&keys_, &values_}) {
    for (const auto& t : *held) {
      if (t.defined()) total += t.numel() * static_cast<int64_t>(t.element_size());
    }
  }
  return total;
}

}  // namespace qtrain::engine::model
