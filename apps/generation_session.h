// What `qtrain generate` and `qtrain chat` share: their options, and the model, tokenizer, chat
// template and decoding settings those options make (the setup is engine/train/run_model.h's).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/config/run_config.h"
#include "engine/generate/generator.h"
#include "engine/generate/prompts.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/train/run_model.h"

namespace qtrain::apps {

struct GenerationFlags {
  std::string config;
  std::string adapter;
  std::vector<std::string> sets;
  std::string chat_template;
  std::string system;
  int64_t max_new_tokens = 256;
  double temperature = 0;
  int64_t top_k = 0;
  double top_p = 1;
  double min_p = 0;
  double repetition_penalty = 1;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

void add_generation_flags(CLI::App* command, GenerationFlags& flags);

struct GenerationSession {
  engine::config::RunConfig config;
  engine::train::RunModel model;
  std::unique_ptr<engine::data::TextTokenizer> own_tokenizer;  // where the run's has none
  const engine::data::TextTokenizer* tokenizer = nullptr;
  std::optional<std::string> chat_template;  // its Jinja text
  std::string system;                        // --system
  engine::generate::GenerationOptions options;
  std::unique_ptr<engine::schedule::LayerScheduler> scheduler;

  // Prompts to ids; `chat`: plain prompts become user messages (engine/generate/prompts.h).
  engine::generate::PromptEncoder encoder(bool chat) const {
    return engine::generate::PromptEncoder(*tokenizer, chat_template, chat, system);
  }
};

// Loads what `flags` name; `command` leads the lines it writes to stderr.
std::unique_ptr<GenerationSession> open_generation(const GenerationFlags& flags, const std::string& command);

}  // namespace qtrain::apps
