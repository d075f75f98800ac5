// A decoder-only language model (LlamaForCausalLM and relatives): token embeddings, decoder
// layers, final norm, output head. Loaded from a Hugging Face folder with the base linear
// weights quantized on load (or read already quantized from a bitsandbytes checkpoint). The
// model holds weights and computes pieces; the layer loop belongs to engine/schedule.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/io/hf_folder.h"
#include "engine/model/decoder_layer.h"
#include "engine/model/model_config.h"
#include "engine/model/quant_spec.h"

namespace qtrain::engine::model {

struct LoadOptions {
  QuantSpec quant;
  at::ScalarType dtype = at::kFloat;  // compute dtype: float32, bfloat16 or float16
  at::Device device = at::kCPU;
  // Decoder layers whose base linear weights are kept in CPU memory after quantization (the
  // layers offload/ will stream; see engine/schedule/streamed_weights.h).
  std::vector<int64_t> host_layers;
  // axolotl's quantize_moe_experts: routed experts are quantized per expert as `quant` says
  // (true), or kept in the compute dtype (false). Routers are never quantized.
  bool quantize_moe_experts = true;
  // How the routed experts are applied to their rows (engine/model/moe_experts.h).
  ExpertKernel expert_kernel = ExpertKernel::automatic;
  // axolotl's model_config: config.json keys whose values replace the file's (as axolotl sets
  // them on the transformers config before loading), e.g. {"output_router_logits": true}.
  nlohmann::json model_config = nlohmann::json::object();
  // Called with each decoder layer (and its index) once it is loaded and checked, before the next
  // one is read: a sharded base (engine/dist/sharded_base.h) keeps its slice of the layer
  // here, so that loading never holds more than one whole layer besides the slices.
  std::function<void(int64_t, DecoderLayer&)> on_layer_loaded;
  // Whether this process reads decoder layer i's base linear weights (null: every layer's). A
  // layer it does not read gets placeholders (LinearLayer::placeholder: meta tensors, shapes
  // checked against the checkpoint's header, no values read, not moved to host_layers' memory);
  // norms, biases and routers are read as always. A sharded base reads each layer on one rank
  // and sends the other ranks their slices in on_layer_loaded.
  std::function<bool(int64_t)> reads_layer_weights;
};

// The tokens the loss predicts for host `labels` [B, T] (labels[:, 1:] != -100), counted without
// the device: what loss_sum counts.
int64_t predicted_token_count(const at::Tensor& labels);

class CausalLM {
 public:
  static CausalLM load(const io::HfFolder& folder, const LoadOptions& options);
  // Decoder layer i of `folder` (the folder and options this model was loaded with), read and
  // checked again as load reads it, here with its values: what a model loaded with placeholders
  // (LoadOptions::reads_layer_weights) reads one layer at a time.
  DecoderLayer load_layer(const io::HfFolder& folder, const LoadOptions& options, int64_t i) const;

  const ModelConfig& config() const { return config_; }
  at::ScalarType dtype() const { return dtype_; }
  const at::Device& device() const { return device_; }
  const std::vector<DecoderLayer>& layers() const { return layers_; }
  std::vector<DecoderLayer>& layers() { return layers_; }
  const at::Tensor& embed_tokens() const { return embed_; }
  const at::Tensor& lm_head() const { return lm_head_; }
  const at::Tensor& norm_weight() const { return norm_; }

  // ids: int64 [B, T] -> [B, T, H] in the compute dtype (Gemma: times sqrt(H)).
  at::Tensor embed(const at::Tensor& ids) const;
  // The rope tables (cos/sin, and the sliding layers' own where they have one) for positions
  // 0..T-1 of every row, or for per-row `positions` (int64 [B, T]); no segments.
  LayerInputs layer_inputs(int64_t seq_len) const;
  LayerInputs layer_inputs(const at::Tensor& positions) const;
  at::Tensor final_norm(const at::Tensor& h) const;
  // h: [B, T, H] after final_norm -> logits [B, T, V] in the compute dtype, soft-capped where the
  // model caps them (for evaluation of short inputs; training uses loss_sum, which never holds all
  // logits).
  at::Tensor logits(const at::Tensor& h) const;
  // Sum of the token losses and the number of predicted tokens. labels: int64 [B, T] in
  // transformers' convention (shifted inside: position t predicts label t+1; -100 ignored).
  // `predicted_tokens`: that count when the caller has it from host data; -1: counted here (from
  // labels on the host, or a host read of labels on a device, Note [Host reads]).
  std::pair<at::Tensor, int64_t> loss_sum(const at::Tensor& h,
                                          const at::Tensor& labels,
                                          int64_t predicted_tokens = -1) const;

  // Per row of h [B, T, H] (after final_norm): the summed log-probabilities of the tokens it
  // predicts (labels [B, T] != -100 after the shift), float32 [B], differentiable: a sequence's
  // log-likelihood, what preference objectives compare (TRL's per-token log_probs, summed). Through
  // the same chunked cross-entropy as loss_sum, a row at a time. With `token_weights` (float32
  // [B, T] on the model's device, the weight of each token of `labels`) each token's
  // log-probability counts that many times (LD-DPO's weighting, Note [DPO loss]).
  at::Tensor sequence_log_probs(const at::Tensor& h,
                                const at::Tensor& labels,
                                const at::Tensor& token_weights = {}) const;
  // The columns of head_sums that cost a pass over the vocabulary's softmax.
  struct HeadSumsOf {
    bool entropy = false;
    bool wpo = false;  // needs labels
  };
  // Per row, sums over the positions where `positions` (bool [B, T], host data) is true, float32
  // [B, 4], without gradient, of the logits (soft-capped where the model caps): their mean over the
  // vocabulary (TRL's logits/chosen and logits/rejected), the entropy of their softmax (TRL's
  // entropy), 1 where the largest (the first of equals) is at the token `labels` (long [B, T],
  // host data) holds one place later (TRL's mean_token_accuracy), and that token's log-probability
  // less the log of the sum of the squared probabilities (WPO's alignment, TRL's log_probs -
  // log_sum_sq_probs); each before the division by the positions. Undefined `labels`, or a column
  // `of` leaves out: that column is 0 (and not computed).
  at::Tensor head_sums(const at::Tensor& h, const at::Tensor& positions, const at::Tensor& labels, HeadSumsOf of) const;

  // Every trainable tensor of the model: each layer's (its LoRA tensors and norms trained in
  // full), then the embeddings, the head and the final norm trained in full.
  std::vector<at::Tensor> trainable_parameters() const;

  // The token embeddings and the output head trained in full (PEFT's modules_to_save; Note
  // [Modules trained in full] in engine/model/saved_modules.h): float32 trainable leaves [V, H]
  // that embed(), logits() and loss_sum() use in place of the frozen ones, or undefined.
  const at::Tensor& trained_embed_tokens() const { return trained_embed_; }
  const at::Tensor& trained_lm_head() const { return trained_head_; }
  // Sets one (a float32 leaf of the embeddings' shape, on the model's device; checked), or
  // clears it with an undefined tensor.
  void set_trained_embed_tokens(const at::Tensor& weight);
  void set_trained_lm_head(const at::Tensor& weight);
  // The model's norm weights by module path ("model.layers.0.input_layernorm", ...,
  // "model.norm"), in layer order, the final norm last.
  std::vector<std::pair<std::string, at::Tensor>> norm_weights() const;
  // The norms trained in full (modules_to_save), by module path: float32 trainable leaves that
  // the layers compute with in place of the frozen weights (which they replace).
  const std::map<std::string, at::Tensor>& trained_norms() const { return trained_norms_; }
  // Trains the norm at `module` (a path norm_weights names) in full from `weight`, a float32 leaf
  // of its shape on the model's device (checked).
  void set_trained_norm(const std::string& module, const at::Tensor& weight);
  // Replaces the frozen embeddings and head with [V', H] ones of their dtype and device (`head`
  // the same tensor as `embed` on a model with tied embeddings); vocab_size becomes V'. Only
  // before trained copies are set (engine/model/resize_embeddings.h).
  void set_embeddings(const at::Tensor& embed, const at::Tensor& head);

 private:
  // The embeddings and output head as this step computes with them: the trained copies in the
  // compute dtype where there are (differentiable into them), else the frozen ones.
  at::Tensor embed_weight() const;
  at::Tensor head_weight() const;

  ModelConfig config_;
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
  at::Tensor embed_;                         // [V, H]
  at::Tensor norm_;                          // [H]
  at::Tensor lm_head_;                       // [V, H]; the embedding itself when tied
  at::Tensor embed_scale_;                   // Gemma: sqrt(H) in the compute dtype; undefined otherwise
  at::Tensor trained_embed_, trained_head_;  // float32 [V, H] leaves, or undefined
  std::map<std::string, at::Tensor> trained_norms_;
  at::Tensor inv_freq_;
  at::Tensor sliding_inv_freq_;  // Gemma 3's sliding layers; undefined otherwise
  std::vector<DecoderLayer> layers_;
};

}  // namespace qtrain::engine::model
