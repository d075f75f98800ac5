// See generation_session.h.
#include "apps/generation_session.h"

#include <cstdio>

#include <c10/util/Exception.h>

#include "apps/command_config.h"
#include "engine/data/model_tokenizer.h"

namespace qtrain::apps {

void add_generation_flags(CLI::App* cmd, GenerationFlags& f) {
  cmd->add_option("config", f.config, "run config (YAML, axolotl keys) naming base_model")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--adapter", f.adapter, "PEFT adapter folder (default: the config's lora_model_dir; none: the base)");
  cmd->add_option("--chat-template",
                  f.chat_template,
                  "a template name (chatml, llama3, gemma3, ...) or a .jinja file (default: the config's "
                  "chat_template, else the tokenizer's)");
  cmd->add_option("--system", f.system, "a system message before each conversation's first user message");
  cmd->add_option("--max-new-tokens", f.max_new_tokens, "tokens to generate at most per completion")
      ->capture_default_str();
  cmd->add_option("--temperature", f.temperature, "0: greedy; above 0: sample at that temperature")
      ->capture_default_str();
  cmd->add_option("--top-k", f.top_k, "sample from the k most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", f.top_p, "sample from the most likely tokens that reach this probability (1: off)")
      ->capture_default_str();
  cmd->add_option("--min-p", f.min_p, "drop tokens below this fraction of the most likely one's probability (0: off)")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", f.repetition_penalty, "transformers' repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--seed", f.seed, "seed of the sampling draws (default: the config's seed)");
  cmd->add_option("--stop", f.stop, "text that ends a completion, cut before it (repeatable)");
  cmd->add_flag("--ignore-eos",
                f.ignore_eos,
                "go on past the end-of-sequence and end-of-turn tokens, to --max-new-tokens (speed measurements)");
  cmd->add_option("--set", f.sets, "override a config key: --set key=value (repeatable)");
}

std::unique_ptr<GenerationSession> open_generation(const GenerationFlags& f, const std::string& command) {
  using namespace engine;
  auto config = load_command_config(f.config, f.sets);
  auto model = train::load_run_model(config, f.adapter, command, stderr);
  auto s = std::unique_ptr<GenerationSession>(new GenerationSession{std::move(config), std::move(model)});
  const auto& c = s->config;
  if (s->model.tokenizer) {
    s->tokenizer = s->model.tokenizer.get();
  } else {
    s->own_tokenizer = data::model_tokenizer(c.base_model, s->model.lm->config().vocab_size);
    TORCH_CHECK(s->own_tokenizer,
                c.base_model.string(),
                " has no tokenizer.json, and its vocabulary is not the built-in byte tokenizer's: generating needs "
                "the model's tokenizer files beside its weights");
    s->tokenizer = s->own_tokenizer.get();
  }
  s->chat_template =
      generate::chat_template_source(c, f.chat_template, std::filesystem::path(f.config).parent_path(), *s->tokenizer);
  s->system = f.system;
  auto& o = s->options;
  o.max_new_tokens = f.max_new_tokens;
  o.sampling = {f.temperature, f.top_k, f.top_p, f.min_p, f.repetition_penalty};
  generate::check_sampling(o.sampling);
  o.seed = f.seed.value_or(static_cast<uint64_t>(c.seed));
  if (!f.ignore_eos) o.stop_ids = generate::stop_ids(c, *s->tokenizer);
  o.stop_strings = f.stop;
  s->scheduler = std::make_unique<schedule::LayerScheduler>(*s->model.lm, s->model.residency);
  return s;
}

}  // namespace qtrain::apps
