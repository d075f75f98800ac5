// bitsandbytes' AdamW8bit (bitsandbytes.optim.AdamW8bit, 0.50): AdamW whose two moments are held
// in 8 bits per element with a float32 scale per block of 256, so its state costs about 2 bytes
// per parameter instead of 8. Parameters of fewer than 4096 elements (bitsandbytes'
// min_8bit_size) keep float32 moments and take bitsandbytes' 32-bit update. Each step runs the
// arithmetic of bitsandbytes' CPU backend op for op, so a qtrain run and a bitsandbytes run with
// the same gradients produce the same weights; see Note [AdamW8bit update] in adamw_8bit.cpp.
// The axolotl names adamw_bnb_8bit, adamw_8bit and paged_adamw_8bit select it.
#pragma once

#include "engine/train/optimizer.h"
#include "ops/quant/blockwise_8bit.h"

namespace qtrain::engine::train {

class AdamW8bit final : public Optimizer {
 public:
  static constexpr std::string_view kName = "adamw_bnb_8bit";
  // bitsandbytes' block of 8-bit optimizer state, and its min_8bit_size.
  static constexpr int64_t kBlocksize = ops::kOptimizerStateBlocksize;
  static constexpr int64_t kMin8bitNumel = ops::kOptimizerMin8bitNumel;

  // `params`: float32 leaf tensors, updated in place. The state (zero) is created here.
  AdamW8bit(std::vector<at::Tensor> params, AdamWOptions options);

  using Optimizer::step;
  void step(double lr, const at::Tensor& apply) override;
  // "step", then per parameter i "exp_avg.<i>" and "exp_avg_sq.<i>": uint8 codes of the
  // parameter's shape, with "exp_avg_absmax.<i>" and "exp_avg_sq_absmax.<i>" (float32
  // [ceil(n / 256)]) when the parameter has 8-bit state; float32 moments of its shape otherwise.
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const override;
  void load_state_tensors(const std::map<std::string, at::Tensor>& state, const std::string& source) override;
  std::string_view name() const override { return kName; }

  // Whether parameter i keeps 8-bit moments (it has at least kMin8bitNumel elements).
  bool is_8bit(size_t i) const { return state_[i].exp_avg.scalar_type() == at::kByte; }

 private:
  struct Moments {
    at::Tensor exp_avg;            // uint8 codes of the signed dynamic map, or float32
    at::Tensor exp_avg_sq;         // uint8 codes of the unsigned dynamic map, or float32
    at::Tensor exp_avg_absmax;     // float32 [blocks]; undefined for float32 moments
    at::Tensor exp_avg_sq_absmax;  // float32 [blocks]; undefined for float32 moments
  };
  std::vector<Moments> state_;  // per parameter, on its device
  at::Tensor qmap1_;            // the signed dynamic map, float32 [256], on the parameters' device
  at::Tensor qmap2_;            // the unsigned dynamic map, float32 [256], on the parameters' device
};

}  // namespace qtrain::engine::train
