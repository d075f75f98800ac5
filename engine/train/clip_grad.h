// Gradient clipping by global L2 norm, and the non-finite check before an optimizer step.
//
// The numbers are torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=2, foreach=False)'s,
// bit for bit, so that the Trainer's `max_grad_norm` does the same here as in Python.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace qtrain::engine::train {

// total_norm = vector_norm(stack([vector_norm(g) for g in grads])) over the defined grads (in
// the order of `params`; undefined grads are skipped), then every grad *= min(1, max_norm /
// (total_norm + 1e-6)) in place, computed in float32 as torch does. max_norm <= 0: no clipping,
// only the norm. Returns total_norm before clipping, a float32 scalar on the grads' device that
// the caller reads where it logs (Note [Host reads] in ops/host_read.h); 0 on the CPU when no grad
// is defined. A NaN or inf norm scales the grads by NaN or 0 as torch does
// (error_if_nonfinite=False): skip such a step by grads_finite. torch groups grads by (device,
// dtype) before stacking the norms; with one device and dtype, as for LoRA weights, that is the
// order of `params`.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

// Whether every element of every defined grad is finite (undefined grads are skipped), as a bool
// scalar on the grads' device (the CPU without grads), for the caller to read with the step's
// other values in one host read (Note [Host reads] in ops/host_read.h).
at::Tensor grads_finite(const std::vector<at::Tensor>& params);

}  // namespace qtrain::engine::train
