// Random routed experts for the expert-kernel tests: E experts of [2I, H] and [H, I], quantized
// as asked, with LoRA r=8 on both projections and a random B (so that every LoRA gradient is
// non-zero), and a top-K routing that never chooses one expert.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "engine/model/moe_experts.h"

namespace qtrain::test {

struct ExpertShape {
  int64_t experts = 6, hidden = 64, inter = 32, tokens = 24, top_k = 2, unused = 3, rank = 8;
};

inline engine::model::MoeExperts random_experts(const ExpertShape& s,
                                                const engine::model::QuantSpec& quant,
                                                at::ScalarType dtype,
                                                at::Device device = at::kCPU) {
  using engine::model::LinearLayer;
  at::manual_seed(1);
  engine::model::MoeExperts ex;
  ex.name = "model.layers.0.mlp.experts";
  for (int64_t e = 0; e < s.experts; ++e) {
    const auto p = ex.name + "." + std::to_string(e);
    ex.gate_up.push_back(LinearLayer::make(
        p + ".gate_up_proj", (at::randn({2 * s.inter, s.hidden}) * 0.1).to(device), std::nullopt, quant, dtype));
    ex.down.push_back(LinearLayer::make(
        p + ".down_proj", (at::randn({s.hidden, s.inter}) * 0.1).to(device), std::nullopt, quant, dtype));
  }
  engine::lora::LoraConfig lc;
  lc.r = s.rank;
  lc.alpha = 2.0 * s.rank;
  lc.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  ex.gate_up_lora = engine::lora::expert_lora_init(s.experts, s.hidden, 2 * s.inter, lc, gen, device);
  ex.down_lora = engine::lora::expert_lora_init(s.experts, s.inter, s.hidden, lc, gen, device);
  for (auto* l : {&*ex.gate_up_lora, &*ex.down_lora}) {
    at::NoGradGuard no_grad;
    l->stacked.b.copy_(at::randn(l->stacked.b.sizes()) * 0.1);
  }
  return ex;
}

// Top-K of random scores, expert `s.unused` never chosen; weights in `dtype`, requiring grad.
inline engine::model::Routing random_routing(const ExpertShape& s, at::ScalarType dtype, at::Device device = at::kCPU) {
  at::manual_seed(2);
  auto scores = at::rand({s.tokens, s.experts});
  scores.select(1, s.unused).fill_(-1);
  auto [w, idx] = at::topk(scores, s.top_k);
  engine::model::Routing r;
  r.experts = idx.to(device);
  r.weights = at::softmax(w, -1).to(device, dtype).requires_grad_();
  return r;
}

// One forward and backward of `ex` with `kernel` on random x and output gradient: the output and
// the gradients of x, the routing weights and the four LoRA tensors (gate_up A, B, down A, B).
struct ExpertGrads {
  at::Tensor y, x, weights;
  std::vector<at::Tensor> lora;
};

inline ExpertGrads run_experts(engine::model::MoeExperts& ex,
                               engine::model::ExpertKernel kernel,
                               const ExpertShape& s,
                               at::ScalarType dtype,
                               at::Device device = at::kCPU) {
  ex.kernel = kernel;
  for (auto* l : {&*ex.gate_up_lora, &*ex.down_lora}) {
    l->stacked.a.mutable_grad() = at::Tensor();
    l->stacked.b.mutable_grad() = at::Tensor();
  }
  at::manual_seed(3);
  const auto x = at::randn({s.tokens, s.hidden}).to(device, dtype).requires_grad_();
  auto routing = random_routing(s, dtype, device);
  const auto y = ex.forward(x, routing, /*training=*/true);
  at::manual_seed(4);
  y.backward(at::randn(y.sizes()).to(device, dtype));
  ExpertGrads g{y.detach(), x.grad(), routing.weights.grad(), {}};
  for (auto* l : {&*ex.gate_up_lora, &*ex.down_lora}) {
    g.lora.push_back(l->stacked.a.grad());
    g.lora.push_back(l->stacked.b.grad());
  }
  return g;
}

}  // namespace qtrain::test
