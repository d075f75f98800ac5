// See eval_command.h.
#include "apps/eval_command.h"

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "apps/command_config.h"
#include "engine/data/pretokenized.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/train/run_model.h"
#include "engine/train/training_data.h"

namespace qtrain::apps {
namespace {

struct Options {
  std::string config;
  std::string data;
  std::string adapter;
  std::vector<std::string> sets;
};

// --data: a pre-tokenized JSONL; otherwise the config's datasets through the model's tokenizer,
// as training reads them (all rows, not only the val_set_size split). Data lines go to stderr:
// stdout holds the result alone.
std::vector<engine::data::Sample> eval_samples(const engine::config::RunConfig& c,
                                               const std::string& data,
                                               const engine::data::TextTokenizer* tokenizer,
                                               int64_t vocab_size) {
  if (!data.empty()) return engine::data::read_pretokenized_jsonl(data, c.sequence_len, vocab_size);
  TORCH_CHECK(!c.datasets.empty(), "no data to evaluate: pass --data FILE.jsonl or list datasets in the config");
  return engine::train::load_training_samples(c, tokenizer, stderr);
}

void run(const Options& o) {
  using namespace engine;
  const auto c = load_command_config(o.config, o.sets);
  auto loaded = train::load_run_model(c, o.adapter, "eval", stderr);
  const auto samples = eval_samples(c, o.data, loaded.tokenizer.get(), loaded.lm->config().vocab_size);
  schedule::LayerScheduler scheduler(*loaded.lm, loaded.residency);
  const auto plan = scheduler.prepare_eval();
  double loss_sum = 0;
  int64_t tokens = 0;
  const size_t batch = static_cast<size_t>(c.micro_batch_size);
  const size_t batches = (samples.size() + batch - 1) / batch;
  for (size_t b = 0; b < batches; ++b) {
    const auto mb = data::make_batch(samples, b * batch, std::min(samples.size(), (b + 1) * batch));
    const auto r = scheduler.eval_loss(plan, mb.input_ids, mb.labels);
    loss_sum += r.loss_sum.item<double>();
    tokens += r.tokens;
    std::fprintf(stderr, "\reval: batch %zu/%zu, %lld tokens", b + 1, batches, static_cast<long long>(tokens));
  }
  std::fprintf(stderr, "\n");
  TORCH_CHECK(tokens > 0, "the data has no predicted tokens (every label is -100 or every row has one token)");
  const double loss = loss_sum / static_cast<double>(tokens);
  std::printf("%s\n",
              nlohmann::json{{"loss", loss}, {"tokens", tokens}, {"perplexity", std::exp(loss)}}.dump().c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "eval", "Loss and perplexity of the base model (+ adapter) on the config's datasets or a pre-tokenized file");
  cmd->add_option("config", o->config, "run config (YAML, axolotl keys)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--data", o->data, "pre-tokenized JSONL to evaluate on (default: the config's datasets)");
  cmd->add_option("--adapter", o->adapter, "PEFT adapter folder (default: the config's lora_model_dir)");
  cmd->add_option("--set", o->sets, "override a config key: --set key=value (repeatable)");
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::apps
