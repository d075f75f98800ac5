// See tiled_mlp.h.
#include "engine/schedule/tiled_mlp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "engine/schedule/rng_state.h"

namespace qtrain::engine::schedule {

namespace {

// `mlp` over x's tokens in `shards` chunks, the outputs put back together in x's shape.
at::Tensor run_chunks(const model::MlpFn& mlp, const at::Tensor& x, int64_t shards) {
  const auto flat = x.reshape({-1, x.size(-1)});
  std::vector<at::Tensor> outs;
  for (const auto& chunk : at::tensor_split(flat, shards, 0)) outs.push_back(mlp(chunk));
  auto out = at::cat(outs);
  auto sizes = x.sizes().vec();
  sizes.back() = out.size(-1);
  return out.view(sizes);
}

}  // namespace

TiledMlp::TiledMlp(int64_t shards) : shards_(shards) {
  TORCH_CHECK(shards >= 0, "tiled MLP: the number of shards must be positive (or 0: automatic), got ", shards);
}

int64_t tiled_mlp_shards(int64_t shards, int64_t tokens) {
  const int64_t n = shards > 0 ? shards : (tokens + kDefaultTiledMlpTokens - 1) / kDefaultTiledMlpTokens;
  return std::clamp<int64_t>(n, 1, std::max<int64_t>(tokens, 1));
}

void TiledMlp::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  calls_.clear();
}

model::MlpRunner TiledMlp::runner() {
  return [this](model::MlpFn mlp, const at::Tensor& x, std::vector<at::Tensor> params) {
    const int64_t tokens = x.numel() / x.size(-1);
    const int64_t shards = shards_of(tokens);
    if (shards == 1) return mlp(x);
    if (!at::GradMode::is_enabled()) return run_chunks(mlp, x, shards);  // evaluation: nothing to keep
    const model::MlpFn* kept = nullptr;
    {
      // Backward's recomputes (on autograd's thread) push too.
      std::lock_guard<std::mutex> lock(mutex_);
      calls_.push_back(std::move(mlp));
      kept = &calls_.back();
    }
    return TiledMlpFunction::apply(x, at::TensorList(params), kept, shards)[0];
  };
}

torch::autograd::variable_list TiledMlpFunction::forward(torch::autograd::AutogradContext* ctx,
                                                         const at::Tensor& x,
                                                         at::TensorList params,
                                                         const model::MlpFn* mlp,
                                                         int64_t shards) {
  ctx->saved_data["mlp"] = reinterpret_cast<int64_t>(mlp);
  ctx->saved_data["shards"] = shards;
  ctx->saved_data["rng"] = rng_state(x.device());
  // The parameters are leaves: saving them keeps references, not copies.
  std::vector<at::Tensor> saved = {x};
  saved.insert(saved.end(), params.begin(), params.end());
  ctx->save_for_backward(saved);
  // apply() runs this under no-grad: each chunk's intermediates are freed before the next.
  return {run_chunks(*mlp, x, shards)};
}

torch::autograd::variable_list TiledMlpFunction::backward(torch::autograd::AutogradContext* ctx,
                                                          torch::autograd::variable_list grad_out) {
  const auto* mlp = reinterpret_cast<const model::MlpFn*>(ctx->saved_data.at("mlp").toInt());
  const int64_t shards = ctx->saved_data.at("shards").toInt();
  const auto saved = ctx->get_saved_variables();
  const auto& x = saved[0];
  const std::vector<at::Tensor> params(saved.begin() + 1, saved.end());
  // The backward engine runs on its own thread: grad mode must be switched on here.
  at::AutoGradMode grad_mode(true);
  RngStateGuard rng(x.device(), ctx->saved_data.at("rng").toTensor());
  const auto flat = x.detach().reshape({-1, x.size(-1)});
  const auto grad = grad_out[0].reshape({flat.size(0), -1});
  const auto x_chunks = at::tensor_split(flat, shards, 0);
  const auto grad_chunks = at::tensor_split(grad, shards, 0);
  std::vector<at::Tensor> x_grads;
  std::vector<at::Tensor> param_grads(params.size());
  for (size_t i = 0; i < x_chunks.size(); ++i) {
    auto xc = x_chunks[i].detach().requires_grad_(x.requires_grad());
    const auto out = (*mlp)(xc);
    std::vector<at::Tensor> inputs;
    if (x.requires_grad()) inputs.push_back(xc);
    inputs.insert(inputs.end(), params.begin(), params.end());
    if (inputs.empty() || !out.requires_grad()) continue;
    const auto grads = torch::autograd::grad({out},
                                             inputs,
                                             {grad_chunks[i]},
                                             /*retain_graph=*/false,
                                             /*create_graph=*/false,
                                             /*allow_unused=*/true);
    size_t next = 0;
    if (x.requires_grad()) x_grads.push_back(grads[next++]);
    for (size_t j = 0; j < params.size(); ++j, ++next) {
      if (!grads[next].defined()) continue;
      param_grads[j] = param_grads[j].defined() ? param_grads[j] + grads[next] : grads[next];
    }
  }
  torch::autograd::variable_list result;
  result.push_back(x.requires_grad() && x_grads.size() == x_chunks.size() ? at::cat(x_grads).view(x.sizes())
                                                                          : at::Tensor());
  result.insert(result.end(), param_grads.begin(), param_grads.end());
  result.push_back(at::Tensor());  // mlp
  result.push_back(at::Tensor());  // shards
  return result;
}

}  // namespace qtrain::engine::schedule
