// Text from prompts with the model as it trains: the quantized base with its adapters unmerged,
// through the layer scheduler (so streamed layers stream), a KV cache per batch of prompts
// (engine/model/kv_cache.h) and transformers' choice of the next token (sampling.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/data/text_tokenizer.h"
#include "engine/generate/sampling.h"
#include "engine/schedule/layer_scheduler.h"

namespace qtrain::engine::generate {

struct GenerationOptions {
  int64_t max_new_tokens = 256;
  Sampling sampling;
  uint64_t seed = 0;
  // Ids that end a completion (the tokenizer's end-of-sequence, the config's eot_tokens, the
  // model's generation_config.json eos_token_id), and text that ends it (cut before it).
  std::vector<int64_t> stop_ids;
  std::vector<std::string> stop_strings;
  // Prompts decoded together, left-padded to one length (Note [KV cache]).
  int64_t batch_size = 8;
};

struct Completion {
  std::vector<int64_t> ids;  // the new tokens; the stop token last where one ended it
  std::string text;          // decoded without special tokens, cut before a stop string
  std::string stop_reason;   // "stop_token", "stop_string" or "max_new_tokens"
};

// Wall time of the last generate() call, for the speed figures.
struct GenerationTimes {
  double prefill_seconds = 0;  // reading the prompts (each batch's first forward)
  double decode_seconds = 0;   // the forwards after it
  int64_t decoded_tokens = 0;  // tokens those forwards made, every row counted
};

// Receives text as it is made: the prompt's index and the next piece of its completion. A piece
// is withheld while it could still become a stop string or ends inside a UTF-8 character.
using OnText = std::function<void(size_t prompt, const std::string& piece)>;

// Completions of `prompts` (token ids each, non-empty), in order; `scheduler` runs the model
// under an eval plan, `tokenizer` decodes the text.
std::vector<Completion> generate(schedule::LayerScheduler& scheduler,
                                 const data::TextTokenizer& tokenizer,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerationOptions& options,
                                 const OnText& on_text = {},
                                 GenerationTimes* times = nullptr);

}  // namespace qtrain::engine::generate
