// LoRA on the stacked experts of a mixture-of-experts block, in PEFT's layout for LoRA on a 3-D
// parameter (peft/tuners/lora/layer.py: ParamWrapper, `target_parameters`), so that adapters move
// between qtrain and PEFT unchanged. See Note [Expert LoRA layout].
//
// Note [Expert LoRA layout]
// For a parameter [E, out, in] (transformers' gate_up_proj [E, 2I, H] and down_proj [E, H, I])
// PEFT keeps one A and one B for all experts:
//     A: [r*E, in]   row e*r + j is (expert e, rank j): expert-major
//     B: [out, r*E]  column j*E + e is (rank j, expert e): expert-MINOR
// so expert e's pair is A_e = A[e*r:(e+1)*r] and B_e = B[:, e::E] (not B[:, e*r:(e+1)*r]), and
//     delta W_e = scaling * B_e @ A_e,   scaling = lora_alpha / r (rsLoRA: / sqrt(r)).
// PEFT applies it by merging delta W into a copy of every expert's weight each forward; qtrain
// applies it unmerged, y = W_e x + scaling * B_e (A_e x), on the rows routed to expert e only.
// The two agree up to float rounding (fp32 parity tests hold to ~1e-6; in bf16 PEFT rounds
// delta W into the bf16 weight, qtrain keeps the LoRA path in fp32 as for linear layers, Note
// [LoRA numerics]). Initialisation is PEFT's: A ~ kaiming_uniform_(a=sqrt(5)) over the whole
// [r*E, in] matrix (bound 1/sqrt(in)), B = 0. PEFT refuses lora_dropout > 0 on parameters.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/lora/lora_config.h"
#include "engine/lora/lora_linear.h"

namespace qtrain::engine::lora {

struct ExpertLora {
  LoraAdapter stacked;  // a: [r*E, in], b: [out, r*E], fp32 trainable leaves; dropout 0
  int64_t num_experts = 0;

  int64_t rank() const { return stacked.a.size(0) / num_experts; }
  // Every expert's adapter, expert e's at [e], as views of the stacked tensors (gradients flow
  // into them). One unbind per stacked tensor: backward gathers the E gradients in one stack,
  // where E separate slices would each add a zero-filled [r*E, in] (or [out, r*E]) tensor.
  std::vector<LoraAdapter> experts() const;
};

// The PEFT module path under which the adapter of `experts`.`parameter` (gate_up_proj or
// down_proj) is saved (See Note [Expert LoRA module names] in engine/model/lora_attach.h): with
// both of an experts module's parameters adapted, gate_up_proj's is nested as
// "<experts>.base_layer" and down_proj's is "<experts>"; with one, it is "<experts>".
std::string expert_adapter_module(const std::string& experts, const std::string& parameter, bool down_proj_adapted);

// The inverse: the "<experts module>.<parameter>" path that the adapter saved under `module`
// adapts, or empty when `module` adapts no targeted parameter (a linear module). The path is what
// rank_pattern and alpha_pattern are matched against.
std::string expert_parameter_path(const std::string& module, const LoraConfig& config);

// PEFT's initialisation (see Note [Expert LoRA layout]); A drawn from `gen` (a CPU generator).
ExpertLora expert_lora_init(int64_t num_experts,
                            int64_t in_features,
                            int64_t out_features,
                            const LoraConfig& config,
                            at::Generator gen,
                            at::Device device = at::kCPU);

// Checks that `stacked` has PEFT's shapes for `num_experts` experts of [out, in] at rank `r`;
// `where` names the source in the error.
void check_expert_lora(const LoraAdapter& stacked,
                       int64_t num_experts,
                       int64_t r,
                       int64_t in_features,
                       int64_t out_features,
                       const std::string& where);

}  // namespace qtrain::engine::lora
