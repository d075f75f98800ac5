// See eval_command.h.
#include "apps/eval_command.h"

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "apps/command_config.h"
#include "engine/data/pretokenized.h"
#include "engine/io/peft_adapter.h"
#include "engine/model/lora_attach.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/train/model_setup.h"
#include "engine/train/run_vocabulary.h"
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
  const auto options = train::load_options(c);
  std::fprintf(stderr, "eval: loading %s on %s\n", c.base_model.c_str(), options.device.str().c_str());
  auto lm = model::CausalLM::load(io::HfFolder::open(c.base_model), options);
  // The config's new tokens size the model as training did (engine/train/run_vocabulary.h).
  const auto vocabulary = train::fit_run_vocabulary(lm, c);
  if (!vocabulary.log_line.empty()) std::fprintf(stderr, "eval: %s\n", vocabulary.log_line.c_str());
  const std::filesystem::path adapter = o.adapter.empty() ? c.lora_model_dir : std::filesystem::path(o.adapter);
  if (!adapter.empty()) {
    model::attach_lora(lm, io::load_peft_adapter(adapter), adapter.string());
    std::fprintf(stderr, "eval: adapter %s\n", adapter.c_str());
  }
  const auto samples = eval_samples(c, o.data, vocabulary.tokenizer.get(), lm.config().vocab_size);
  schedule::LayerScheduler scheduler(lm);
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
