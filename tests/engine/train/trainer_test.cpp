// The trainer end to end on a tiny model: per-step losses equal a transformers + peft training
// run (float32 and NF4 bases); checkpointing and offloading layers change nothing; a run resumed
// from a checkpoint ends exactly where the uninterrupted run ends; kill -9 during checkpoint
// writes leaves every listed checkpoint loadable; SIGINT saves a checkpoint and exits 130; a MoE
// model's load-balancing loss enters each micro-batch and metrics.jsonl.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/data/data_loader.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/train/preference_step.h"
#include "engine/train/run_state.h"
#include "engine/train/trainer.h"
#include "tests/expect_error.h"
#include "tests/reference.h"
#include "tests/run_command.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

class Trainer : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qtrain_trainer_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    qtrain::engine::io::remove_tree(dir_);
    fs::create_directories(dir_);
    // Six pre-tokenized rows of the llama fixture's vocabulary, two of them with masked prompts.
    at::manual_seed(21);
    std::ofstream data(dir_ / "data.jsonl");
    for (int i = 0; i < 6; ++i) {
      const int64_t len = 12 + 3 * i;
      const auto ids = at::randint(0, 160, {len}, at::kLong);
      std::vector<int64_t> v(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len), labels = v;
      if (i % 3 == 0) std::fill(labels.begin(), labels.begin() + 4, -100);
      data << nlohmann::json{{"input_ids", v}, {"labels", labels}}.dump() << "\n";
    }
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  // A config for the fixture model, with `sets` applied as --set overrides.
  config::RunConfig config(const std::string& name, const std::vector<std::string>& sets = {}) const {
    return config::load_run_config(config_file(name), sets);
  }
  fs::path config_file(const std::string& name) const {
    const auto base = test::model_fixture("llama");
    std::ofstream(dir_ / (name + ".yaml")) << "base_model: " << (base / "base").string() << "\n"
                                           << "lora_model_dir: " << (base / "adapter").string() << "\n"
                                           << "lora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                                           << "datasets:\n  - path: data.jsonl\n"
                                           << "sequence_len: 64\nmicro_batch_size: 6\nmax_steps: 20\n"
                                           << "learning_rate: 0.002\nlr_scheduler: cosine\nwarmup_steps: 3\n"
                                           << "max_grad_norm: 1.0\ndevice: cpu\nlogging_steps: 1\nseed: 3\n"
                                           << "output_dir: out-" << name << "\n";
    return dir_ / (name + ".yaml");
  }

  static std::vector<double> losses(const fs::path& output_dir) {
    std::vector<double> out;
    std::ifstream in(output_dir / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(j.at("loss").get<double>());
    }
    return out;
  }

  static std::vector<double> python_losses(const std::string& args) {
    const char* python = std::getenv("QTRAIN_PYTHON");
    const auto cmd = std::string(python) + " " +
                     (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/train_reference.py").string() + " " + args +
                     " 2>/dev/null";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    std::array<char, 4096> buf{};
    while (fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
    EXPECT_EQ(pclose(p), 0) << cmd;
    return nlohmann::json::parse(out).get<std::vector<double>>();
  }

  fs::path dir_;
};

TEST_F(Trainer, LossesMatchTransformersAndPeftForFloatAndNf4Bases) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  for (const std::string quant : {"fp32", "nf4"}) {
    const auto r = train(config(quant, {quant == "nf4" ? "load_in_4bit=true" : "load_in_4bit=false"}));
    EXPECT_EQ(r.steps, 20);
    const auto ours = losses(dir_ / ("out-" + quant));
    const auto theirs = python_losses((base / "base").string() + " " + (base / "adapter").string() + " " +
                                      (dir_ / "data.jsonl").string() + " " + quant + " 20 0.002 3");
    ASSERT_EQ(ours.size(), 20u);
    ASSERT_EQ(theirs.size(), 20u);
    // Same float32 ops on the same weights, AdamW and schedule; the two runs drift apart only
    // by summation-order rounding (~1e-6 per step), amplified a little by 20 updates.
    for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(ours[i], theirs[i], 2e-4 * theirs[i]) << quant << " step " << i + 1;
    EXPECT_LT(ours.back(), ours.front() - 0.1) << "the loss must fall";
  }
}

TEST_F(Trainer, CheckpointingOnAndOffGiveIdenticalLossCurves) {
  const auto on = train(config("on", {"gradient_checkpointing=true", "lora_dropout=0.1"}));
  const auto off = train(config("off", {"gradient_checkpointing=false", "lora_dropout=0.1"}));
  const auto a = losses(on.output_dir), b = losses(off.output_dir);
  ASSERT_EQ(a.size(), 20u);
  EXPECT_EQ(a, b);  // bitwise: the same doubles
}

TEST_F(Trainer, OffloadedActivationsGiveTheSameLossCurveAndSavedAdapter) {
  // On the CPU the checkpointed inputs go through the simulated copy engine and back; with
  // offloaded layers they share it.
  const std::vector<std::string> base = {"load_in_4bit=true", "lora_dropout=0.1", "max_steps=6"};
  const auto kept = train(config("kept", base));
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return more;
  };
  const auto moved = train(config("moved", with({"activation_offloading=true"})));
  const auto both = train(config("both", with({"activation_offloading=true", "offload_layers=2"})));
  const auto a = losses(kept.output_dir);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(losses(moved.output_dir), a);  // bitwise: the same doubles
  EXPECT_EQ(losses(both.output_dir), a);
  const auto x = io::load_peft_adapter(kept.output_dir), y = io::load_peft_adapter(both.output_dir);
  ASSERT_EQ(x.adapters.size(), y.adapters.size());
  for (const auto& [name, ad] : x.adapters) {
    EXPECT_TRUE(test::bitwise_equal(ad.b, y.adapters.at(name).b)) << name;
  }
}

TEST_F(Trainer, TiledMlpGivesTheSameLossCurveToRounding) {
  // Without dropout the tiled run's first loss is the same double; its LoRA gradients differ by
  // float32 rounding (tests/engine/schedule/tiled_mlp_test.cpp), so the later losses drift by
  // about that much, far below the 1e-4 relative bound.
  const std::vector<std::string> base = {"load_in_4bit=true", "lora_dropout=0", "max_steps=6"};
  const auto whole = train(config("whole", base));
  auto sets = base;
  sets.insert(sets.end(), {"tiled_mlp=true", "tiled_mlp_num_shards=3", "activation_offloading=true"});
  const auto tiled = train(config("tiled", sets));
  const auto a = losses(whole.output_dir), b = losses(tiled.output_dir);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(a[0], b[0]);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4 * a[i]) << "step " << i + 1;
}

TEST_F(Trainer, OffloadedLayersGiveTheSameLossCurveAndSavedAdapter) {
  // On the CPU offloaded layers go through the simulated copy engine: the same code path as on
  // a GPU (host store, slot ring, prefetch, rebinding), without the memory saving.
  const auto resident = train(config("resident", {"load_in_4bit=true", "gradient_checkpointing=false", "max_steps=6"}));
  const auto offloaded = train(config("offloaded",
                                      {"load_in_4bit=true",
                                       "gradient_checkpointing=false",
                                       "max_steps=6",
                                       "offload_layers=3",
                                       "offload_prefetch_depth=1"}));
  const auto a = losses(resident.output_dir), b = losses(offloaded.output_dir);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);  // bitwise: the same doubles
  const auto x = io::load_peft_adapter(resident.output_dir), y = io::load_peft_adapter(offloaded.output_dir);
  ASSERT_EQ(x.adapters.size(), y.adapters.size());
  for (const auto& [name, ad] : x.adapters) {
    EXPECT_TRUE(test::bitwise_equal(ad.a, y.adapters.at(name).a)) << name;
    EXPECT_TRUE(test::bitwise_equal(ad.b, y.adapters.at(name).b)) << name;
  }
  // Three layers through two slots: every step streams blobs (metrics.jsonl offload_bytes_per_step).
  std::ifstream in(offloaded.output_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) {
      EXPECT_GT(j.at("offload_bytes_per_step").get<int64_t>(), 0) << line;
    }
  }
  EXPECT_THROW(train(config("auto", {"offload_layers=auto"})), c10::Error);  // auto plans GPU memory
}

TEST_F(Trainer, ResumedRunEqualsUninterruptedRunBitwise) {
  std::vector<std::string> sets = {"load_in_4bit=true",
                                   "lora_dropout=0.1",
                                   "gradient_accumulation_steps=2",
                                   "micro_batch_size=2",
                                   "sample_packing=true",
                                   "save_steps=4"};
  const auto full = train(config("full", sets));
  ASSERT_TRUE(fs::exists(full.output_dir / "checkpoint-8"));
  sets.push_back("resume_from_checkpoint=" + (full.output_dir / "checkpoint-8").string());
  const auto resumed = train(config("resumed", sets));
  EXPECT_EQ(resumed.steps, 20);
  const auto a = losses(full.output_dir), b = losses(resumed.output_dir);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(a[8 + i], b[i]) << "step " << 9 + i;
  const auto fa = io::load_peft_adapter(full.output_dir), fb = io::load_peft_adapter(resumed.output_dir);
  for (const auto& [name, adapter] : fa.adapters) {
    EXPECT_TRUE(test::bitwise_equal(adapter.a, fb.adapters.at(name).a)) << name;
    EXPECT_TRUE(test::bitwise_equal(adapter.b, fb.adapters.at(name).b)) << name;
  }
}

// The embeddings, the head and norms trained in full beside LoRA (PEFT's modules_to_save, read
// from a peft adapter that has them): every step's loss follows transformers + peft's, with the copies
// in the same AdamW, clipping and schedule; and a run resumed from a checkpoint continues
// bitwise, its copies included (tolerance as LossesMatchTransformersAndPeftForFloatAndNf4Bases).
TEST_F(Trainer, ModulesTrainedInFullFollowPeftStepForStepAndResume) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  const std::string adapter = "lora_model_dir=" + (base / "adapter_saved").string();
  const auto full = train(config("saved", {adapter, "save_steps=8"}));
  const auto ours = losses(full.output_dir);
  const auto theirs = python_losses((base / "base").string() + " " + (base / "adapter_saved").string() + " " +
                                    (dir_ / "data.jsonl").string() + " fp32 20 0.002 3");
  ASSERT_EQ(ours.size(), 20u);
  ASSERT_EQ(theirs.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(ours[i], theirs[i], 2e-4 * theirs[i]) << "step " << i + 1;
  const auto resumed = train(
      config("saved-resumed", {adapter, "resume_from_checkpoint=" + (full.output_dir / "checkpoint-8").string()}));
  const auto b = losses(resumed.output_dir);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(ours[8 + i], b[i]) << "step " << 9 + i;
  const auto fa = io::load_peft_adapter(full.output_dir), fb = io::load_peft_adapter(resumed.output_dir);
  ASSERT_EQ(fa.saved_modules.size(), 6u);  // embeddings, head, three input_layernorm, model.norm
  for (const auto& [name, weight] : fa.saved_modules) {
    EXPECT_TRUE(test::bitwise_equal(weight, fb.saved_modules.at(name))) << name;
    // They trained: away from the copies the run started from.
    EXPECT_FALSE(at::equal(weight, io::load_peft_adapter(base / "adapter_saved").saved_modules.at(name))) << name;
  }
}

// unfrozen_parameters naming norms: they train in full beside the adapter (without weight decay,
// as transformers' Trainer), are saved under their module paths in modules_to_save, and a run
// continued from that adapter starts from them.
TEST_F(Trainer, UnfrozenNormsTrainAndAreSavedUnderTheirPaths) {
  const auto base = test::model_fixture("llama");
  const auto run = train(config("unfrozen",
                                {"unfrozen_parameters=[^model.norm.weight$, ^model.layers.+.input_layernorm]",
                                 "weight_decay=0.1",
                                 "max_steps=6"}));
  const auto l = losses(run.output_dir);
  ASSERT_EQ(l.size(), 6u);
  EXPECT_LT(l.back(), l.front());
  const auto saved = io::load_peft_adapter(run.output_dir);
  const std::vector<std::string> paths = {"model.layers.0.input_layernorm",
                                          "model.layers.1.input_layernorm",
                                          "model.layers.2.input_layernorm",
                                          "model.norm"};
  std::vector<std::string> modules;
  for (const auto& [module, weight] : saved.saved_modules) modules.push_back(module);
  EXPECT_EQ(modules, paths);
  const auto folder = io::HfFolder::open(base / "base");
  for (const auto& path : paths) {
    EXPECT_TRUE(saved.config.saves_module(path)) << path;
    EXPECT_FALSE(at::equal(saved.saved_modules.at(path), folder.tensor(path + ".weight"))) << path << " trained";
  }
  EXPECT_FALSE(saved.config.saves_module("model.layers.0.post_attention_layernorm"));
  const auto next = train(config("continued", {"lora_model_dir=" + run.output_dir.string(), "max_steps=1"}));
  EXPECT_LT(losses(next.output_dir).front(), l.front());
  EXPECT_EQ(io::load_peft_adapter(next.output_dir).saved_modules.size(), paths.size()) << "the norms carried on";
}

// Writes `n` pre-tokenized pairs of random ids (below 160) to `path`: pair i has a prompt of 3 + i
// tokens and completions of chosen(i) and rejected(i) tokens.
void write_pairs(const fs::path& path,
                 int n,
                 const std::function<int64_t(int)>& chosen,
                 const std::function<int64_t(int)>& rejected) {
  std::ofstream pairs(path);
  for (int i = 0; i < n; ++i) {
    auto ids = [&](int64_t length) {
      const auto t = at::randint(0, 160, {length}, at::kLong);
      return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + length);
    };
    pairs << nlohmann::json{{"prompt_ids", ids(3 + i)},
                            {"chosen_ids", ids(chosen(i))},
                            {"rejected_ids", ids(rejected(i))}}
                 .dump()
          << "\n";
  }
}

// The rows of a run's metrics.jsonl that log a training loss.
std::vector<nlohmann::json> logged_steps(const fs::path& output_dir) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) rows.push_back(j);
  }
  return rows;
}

// TRL's log of every step of scripts/reference/`script` (preference_reference.py, or
// kto_reference.py) run with `args`.
std::vector<nlohmann::json> trl_logs(const std::string& args, const std::string& script = "preference_reference.py") {
  const auto r = test::run_command(std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                                   (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference" / script).string() + " " + args);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out.substr(r.out.size() > 4000 ? r.out.size() - 4000 : 0);
  // The last line holds the logs (the Trainer prints its own lines before it).
  const auto body = r.out.substr(0, r.out.find_last_not_of('\n') + 1);
  const auto logs = nlohmann::json::parse(body.substr(body.find_last_of('\n') + 1));
  return std::vector<nlohmann::json>(logs.begin(), logs.end());
}

// The size a logged preference value's tolerance is relative to, with `theirs` TRL's row and
// `prefix` "" or "eval_": a reward is beta times a log-likelihood (or a difference of them ~100
// times its size), so its error is beta times the log-likelihood's; log_odds_chosen is a
// difference of mean log-probabilities, and KTO's kl a mean of differences of log-likelihoods,
// scaled by them likewise; logits/* is a mean over the
// vocabulary of logits of size ~1; anything else its own size.
double tolerance_scale(const std::string& key, const nlohmann::json& theirs, double beta, const std::string& prefix) {
  const double logps = std::abs(theirs.at(prefix + "logps/chosen").get<double>());
  if (key.starts_with(prefix + "logits/")) return 1.0;
  if (key.starts_with(prefix + "rewards/") && key != prefix + "rewards/accuracies") return beta * logps;
  if (key == prefix + "log_odds_chosen" || key == prefix + "kl") return logps;
  return std::abs(theirs.at(key).get<double>());
}

// The run config of a preference test run on the llama fixture from adapter0 (B = 0).
void write_preference_config(const fs::path& yaml,
                             const fs::path& base,
                             const fs::path& adapter,
                             const std::string& quant,
                             const std::string& rl_keys,
                             const std::string& output_dir) {
  std::ofstream(yaml) << "base_model: " << (base / "base").string() << "\n"
                      << "lora_model_dir: " << adapter.string() << "\n"
                      << "load_in_4bit: " << (quant == "nf4" ? "true" : "false") << "\n"
                      << "lora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                      << rl_keys << "datasets:\n  - path: pairs.jsonl\n"
                      << "sequence_len: 64\nmicro_batch_size: 4\nmax_steps: 10\n"
                      << "learning_rate: 0.002\nlr_scheduler: cosine\nwarmup_steps: 3\n"
                      << "max_grad_norm: 1.0\ndevice: cpu\nlogging_steps: 1\nseed: 3\n"
                      << "save_steps: 4\noutput_dir: " << output_dir << "\n";
}

// The llama fixture's adapter with B = 0, written to `dir`: a no-op adapter to start from.
void write_zero_adapter(const fs::path& base, const fs::path& dir) {
  auto start = io::load_peft_adapter(base / "adapter");
  for (auto& [module, adapter] : start.adapters) adapter.b.detach().zero_();
  io::save_peft_adapter(dir, start.config, start.adapters, (base / "base").string());
}

// The DPO tests' start in `dir`: 4 pairs (seed 8) and the llama fixture's adapter with B = 0
// (adapter0). Returns the tokenizer folder TRL is given.
fs::path write_dpo_start(const fs::path& base, const fs::path& dir) {
  at::manual_seed(8);
  write_pairs(
      dir / "pairs.jsonl", 4, [](int i) { return 2 + i % 3; }, [](int i) { return 4 - i % 2; });
  write_zero_adapter(base, dir / "adapter0");
  return fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3";
}

// The loss and `rl`'s metrics of each of 10 logged steps within `relative` of TRL's (of the size
// tolerance_scale gives), plus 1e-6 for values near 0.
void expect_steps_near(const std::vector<nlohmann::json>& ours,
                       const std::vector<nlohmann::json>& theirs,
                       const std::string& rl,
                       double relative) {
  ASSERT_EQ(ours.size(), 10u);
  ASSERT_EQ(theirs.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    std::vector<std::string> keys = {"loss"};
    for (const auto& name : preference_metric_names(rl)) keys.push_back(name);
    for (const auto& key : keys) {
      const double a = ours[i].at(key).get<double>(), b = theirs[i].at(key).get<double>();
      EXPECT_NEAR(a, b, relative * tolerance_scale(key, theirs[i], 0.1, "") + 1e-6) << key << " at step " << i + 1;
    }
  }
}

// A float32 rl: dpo run from write_dpo_start's start in `dir` (TRL given `tokenizer`, what it
// returned), with `types` as dpo_loss_type and `keys` (YAML lines), named `name`: its loss and DPO's
// metrics at each of 10 steps within 2e-5 of DPOTrainer's given the same loss_type and `trl_args`
// (preference_reference.py's options).
void expect_dpo_run_follows_trl(const fs::path& base,
                                const fs::path& dir,
                                const fs::path& tokenizer,
                                const std::string& name,
                                const std::string& types,
                                const std::string& keys,
                                const std::string& trl_args) {
  write_preference_config(dir / (name + ".yaml"),
                          base,
                          dir / "adapter0",
                          "fp32",
                          "rl: dpo\nrl_beta: 0.1\ndpo_loss_type: [" + types + "]\n" + keys,
                          "out-" + name);
  const auto r = train(config::load_run_config(dir / (name + ".yaml"), {}));
  const auto theirs =
      trl_logs((base / "base").string() + " " + (dir / "adapter0").string() + " " + (dir / "pairs.jsonl").string() +
               " " + tokenizer.string() + " fp32 10 0.002 3 0.1 " + types + " 64" + trl_args);
  expect_steps_near(logged_steps(r.output_dir), theirs, "dpo", 2e-5);
}

// rl: dpo and ipo against TRL's DPOTrainer (scripts/reference/preference_reference.py) on the same
// pre-tokenized pairs, every pair in every step, from the same adapter with B = 0 (so TRL's
// reference, the base with the adapter off, is where both start): the loss and TRL's metrics at
// each of 10 steps, float32 and NF4 bases. The first loss is ln 2 (float32's) exactly; a resumed
// run goes on bitwise. Tolerance: 2e-5 of the value on float32, plus 1e-6 for values near 0: the
// same float32 operations in another summation order, over 10 updates. On NF4 1e-3: the products
// of the dequantized weights round differently from bitsandbytes' in the last bits (the
// supervised NF4 test allows 2e-4 of a loss), and AdamW's normalised updates of a DPO gradient,
// small at the start, amplify that to about 3e-4 by step 10 (measured: 2e-4 fails from step 6).
TEST_F(Trainer, DpoFollowsTrlsDpoTrainerStepForStep) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  const auto tokenizer = write_dpo_start(base, dir_);
  for (const auto& [quant, rl] :
       std::vector<std::pair<std::string, std::string>>{{"fp32", "dpo"}, {"nf4", "dpo"}, {"fp32", "ipo"}}) {
    SCOPED_TRACE(quant + " " + rl);
    const auto name = "dpo-" + quant + "-" + rl;
    write_preference_config(
        dir_ / (name + ".yaml"), base, dir_ / "adapter0", quant, "rl: " + rl + "\nrl_beta: 0.1\n", "out-" + name);
    const auto r = train(config::load_run_config(dir_ / (name + ".yaml"), {}));
    ASSERT_EQ(r.steps, 10);
    const auto ours = logged_steps(r.output_dir);
    const auto theirs = trl_logs((base / "base").string() + " " + (dir_ / "adapter0").string() + " " +
                                 (dir_ / "pairs.jsonl").string() + " " + tokenizer.string() + " " + quant +
                                 " 10 0.002 3 0.1 " + (rl == "ipo" ? "ipo" : "sigmoid") + " 64");
    expect_steps_near(ours, theirs, rl, quant == "nf4" ? 1e-3 : 2e-5);
    ASSERT_EQ(ours.size(), 10u);
    if (rl == "dpo") EXPECT_EQ(ours[0].at("loss").get<double>(), static_cast<double>(std::log(2.0F)));
    EXPECT_LT(ours.back().at("loss").get<double>(), ours.front().at("loss").get<double>());
    EXPECT_GT(ours.back().at("rewards/margins").get<double>(), 0.0);
    if (quant != "fp32" || rl != "dpo") continue;
    // A run resumed from its step-4 checkpoint continues bitwise.
    const auto resumed = train(config::load_run_config(
        dir_ / (name + ".yaml"),
        {"output_dir=out-resumed", "resume_from_checkpoint=" + (r.output_dir / "checkpoint-4").string()}));
    const auto b = losses(resumed.output_dir);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(b[i], ours[4 + i].at("loss").get<double>()) << "step " << i + 5;
  }
}

// dpo_loss_type's losses with dpo_loss_weights and dpo_label_smoothing against TRL's DPOTrainer
// given the same loss_type, loss_weights and label_smoothing: every loss TRL 1.16 has, in four
// weighted sums (a wrong term moves its sum by about the term's size, far outside the tolerance;
// sppo_hard, about 50 at the start, is weighted down to the others' size), 10 steps, float32, with
// the DPO test's tolerance. The metrics are DPO's whatever the losses.
TEST_F(Trainer, DpoLossTypesFollowTrlsWeightedSumsStepForStep) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  const auto tokenizer = write_dpo_start(base, dir_);
  struct Case {
    std::string types, weights, smoothing;
  };
  const std::vector<Case> cases = {
      {"hinge", "", ""},
      {"sigmoid,ipo,sft", "1,0.5,0.2", ""},
      {"robust,exo_pair,aot,aot_unpaired", "1,1,0.5,0.5", "0.1"},
      {"sigmoid_norm,nca_pair,bco_pair,sppo_hard,apo_zero,apo_down,discopop", "1,1,1,0.02,1,1,1", ""},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& [types, weights, smoothing] = cases[k];
    SCOPED_TRACE(types);
    std::string keys, trl_args;
    if (!weights.empty()) {
      keys += "dpo_loss_weights: [" + weights + "]\n";
      trl_args += " --loss-weights " + weights;
    }
    if (!smoothing.empty()) {
      keys += "dpo_label_smoothing: " + smoothing + "\n";
      trl_args += " --label-smoothing " + smoothing;
    }
    expect_dpo_run_follows_trl(base, dir_, tokenizer, "losses-" + std::to_string(k), types, keys, trl_args);
  }
}

// TRL's variations of the DPO losses (Note [DPO loss]) against DPOTrainer given the same options:
// f-DPO's three other divergences over the losses that take one, LD-DPO's weighting of the
// completions' tails (the model's, the reference's, also precomputed, and sft's unweighted rows),
// WPO's weighting of the pairs (not of hinge or sft, on which TRL 1.16 fails: it scales their
// per-pair losses in place), alone and together; 10 steps, float32, with the DPO test's tolerance. The pairs'
// completions differ in length (2 to 4 tokens against 3 or 4), so every pair has a tail that LD-DPO weighs.
TEST_F(Trainer, DpoVariationsFollowTrlsDivergencesAndWeightingsStepForStep) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  const auto tokenizer = write_dpo_start(base, dir_);
  struct Case {
    std::string types, keys, trl_args;
  };
  const std::vector<Case> cases = {
      {"sigmoid,ipo,sft",
       "dpo_loss_weights: [1, 0.5, 0.2]\nf_divergence_type: forward_kl\nld_alpha: 0.5\n",
       " --loss-weights 1,0.5,0.2 --f-divergence forward_kl 0.5 --ld-alpha 0.5"},
      {"sigmoid,robust,exo_pair",
       "dpo_label_smoothing: 0.1\nf_divergence_type: js_divergence\ndpo_use_weighting: true\n",
       " --label-smoothing 0.1 --f-divergence js_divergence 0.5 --use-weighting"},
      {"sigmoid_norm,discopop",
       "f_divergence_type: alpha_divergence\nf_alpha_divergence_coef: 0.3\ndpo_use_weighting: true\nld_alpha: 0.3\n",
       " --f-divergence alpha_divergence 0.3 --use-weighting --ld-alpha 0.3"},
      {"sigmoid",
       "ld_alpha: 0.3\nprecompute_ref_log_probs: true\nprecompute_ref_batch_size: 3\n",
       " --ld-alpha 0.3 --precompute 3"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& [types, keys, trl_args] = cases[k];
    SCOPED_TRACE(types + " " + trl_args);
    expect_dpo_run_follows_trl(base, dir_, tokenizer, "variations-" + std::to_string(k), types, keys, trl_args);
  }
}

// What a preference run cannot train is refused before the model loads, each with its fix.
TEST_F(Trainer, PreferenceRunsRefuseWhatTheyCannotTrainBeforeLoading) {
  const auto base = test::model_fixture("llama");
  std::ofstream(dir_ / "pairs.jsonl") << "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n";
  const auto refused = [&](const std::string& rl, const std::string& setting, const std::string& fragment) {
    SCOPED_TRACE(rl + " " + setting);
    write_preference_config(dir_ / "refused.yaml", base, dir_ / "none", "fp32", "rl: " + rl + "\n", "out-refused");
    test::expect_error([&] { train(config::load_run_config(dir_ / "refused.yaml", {setting})); }, fragment);
  };
  refused("dpo", "sample_packing=true", "rl: preference pairs are not packed");
  refused("kto", "micro_batch_size=1", "which needs micro_batch_size 2 or more");
  // A user-defined type's keys of the other kind of row.
  refused("kto",
          "datasets=[{path: pairs.jsonl, type: {field_chosen: good}}]",
          "pairs.jsonl: its user-defined type sets field_chosen, a pair's, and rl: kto's rows are a completion and a "
          "label (field_completion, field_label, completion_format); remove it");
  refused("dpo",
          "datasets=[{path: pairs.jsonl, type: {completion_format: \"{completion}\"}}]",
          "its user-defined type sets completion_format, KTO's, and rl: dpo reads pairs");
}

// DPO from a trained adapter (lora_model_dir with B != 0, as after a supervised run), the run
// config's preference keys `keys`, against TRL's DPOTrainer given `trl_args` beyond the DPO
// test's: 10 steps on 4 pairs written to `dir`, float32. TRL's reference is then its frozen "ref"
// copy of that adapter (Note [Reference adapter]): the first loss is ln 2 (with the base as the
// reference it is 0.7029 here), and every logged value is within the DPO test's tolerance.
// Returns the run's logged steps.
std::vector<nlohmann::json> dpo_from_a_trained_adapter(const fs::path& dir,
                                                       const std::string& name,
                                                       const std::string& keys,
                                                       const std::string& trl_args) {
  const auto base = test::model_fixture("llama");
  at::manual_seed(9);
  write_pairs(
      dir / "pairs.jsonl", 4, [](int i) { return 2 + i % 3; }, [](int i) { return 4 - i % 2; });
  auto start = io::load_peft_adapter(base / "adapter");
  for (auto& [module, adapter] : start.adapters) adapter.b.detach().copy_(at::randn(adapter.b.sizes()) * 0.05);
  io::save_peft_adapter(dir / "trained", start.config, start.adapters, (base / "base").string());
  const fs::path tokenizer = fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3";
  write_preference_config(
      dir / (name + ".yaml"), base, dir / "trained", "fp32", "rl: dpo\nrl_beta: 0.1\n" + keys, "out-" + name);
  const auto r = train(config::load_run_config(dir / (name + ".yaml"), {}));
  const auto ours = logged_steps(r.output_dir);
  const auto theirs =
      trl_logs((base / "base").string() + " " + (dir / "trained").string() + " " + (dir / "pairs.jsonl").string() +
               " " + tokenizer.string() + " fp32 10 0.002 3 0.1 sigmoid 64" + trl_args);
  EXPECT_EQ(ours.size(), 10u);
  EXPECT_EQ(theirs.size(), 10u);
  if (ours.size() != 10u || theirs.size() != 10u) return ours;
  EXPECT_EQ(ours[0].at("loss").get<double>(), static_cast<double>(std::log(2.0F)));
  for (size_t i = 0; i < 10; ++i) {
    std::vector<std::string> names = {"loss"};
    for (const auto& metric : preference_metric_names("dpo")) names.push_back(metric);
    for (const auto& key : names) {
      const double a = ours[i].at(key).get<double>(), b = theirs[i].at(key).get<double>();
      EXPECT_NEAR(a, b, 2e-5 * tolerance_scale(key, theirs[i], 0.1, "") + 1e-6) << key << " at step " << i + 1;
    }
  }
  EXPECT_GT(ours.back().at("rewards/margins").get<double>(), 0.0);
  return ours;
}

// DPO continuing a trained adapter takes it as the reference, as TRL does.
TEST_F(Trainer, DpoContinuingAnAdapterTakesItAsTheReferenceAsTrlDoes) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  dpo_from_a_trained_adapter(dir_, "continued", "", "");
}

// precompute_ref_log_probs against TRL's DPOTrainer with the same option, 3 pairs per precompute
// forward against 4 per step (so the rows are padded to other widths than in the steps), from a
// trained adapter (so the precomputed reference is the starting weights'); a run resumed from its
// step-4 checkpoint computes the same reference again and goes on bitwise.
TEST_F(Trainer, PrecomputedReferenceFollowsTrlsAndResumesBitwise) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto ours = dpo_from_a_trained_adapter(
      dir_, "pre", "precompute_ref_log_probs: true\nprecompute_ref_batch_size: 3\n", " --precompute 3");
  ASSERT_EQ(ours.size(), 10u);
  const auto resumed = train(config::load_run_config(
      dir_ / "pre.yaml",
      {"output_dir=out-pre-resumed", "resume_from_checkpoint=" + (dir_ / "out-pre" / "checkpoint-4").string()}));
  const auto b = losses(resumed.output_dir);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(b[i], ours[4 + i].at("loss").get<double>()) << "step " << i + 5;
  // Only with rl: dpo or ipo.
  try {
    train(config::load_run_config(dir_ / "pre.yaml", {"rl=orpo", "output_dir=out-orpo"}));
    FAIL() << "precompute_ref_log_probs with rl: orpo was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("precompute_ref_log_probs: rl orpo has no reference"),
              std::string::npos)
        << e.what_without_backtrace();
  }
}

// rl: orpo and simpo against TRL's ORPOTrainer and CPOTrainer (loss_type simpo), as the DPO test
// above: the loss and every metric of theirs (nll_loss, ORPO's log_odds_ratio and log_odds_chosen
// too) at each of 10 steps, float32 and NF4 for ORPO, float32 for SimPO with and without the NLL
// term (cpo_alpha 1 and 0). Every row of a pair has the same length here, so that no padding
// enters: TRL's logits/* average the padding positions' logits too, which depend on how the
// padding attends (see preference_step.cpp). Tolerances as the DPO test's; log_odds_chosen,
// a difference of two mean log-probabilities, scaled by them as the rewards are.
TEST_F(Trainer, OrpoAndSimpoFollowTrlsTrainersStepForStep) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  at::manual_seed(9);
  write_pairs(
      dir_ / "pairs.jsonl", 4, [](int i) { return 9 - i; }, [](int i) { return 9 - i; });
  write_zero_adapter(base, dir_ / "adapter0");
  const fs::path tokenizer = fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3";
  struct Case {
    std::string quant, rl;
    double cpo_alpha;
  };
  for (const auto& [quant, rl, cpo_alpha] :
       std::vector<Case>{{"fp32", "orpo", 0}, {"nf4", "orpo", 0}, {"fp32", "simpo", 1.0}, {"fp32", "simpo", 0.0}}) {
    const auto name = rl + "-" + quant + "-" + std::to_string(static_cast<int>(cpo_alpha));
    SCOPED_TRACE(name);
    const std::string keys =
        rl == "orpo" ? "rl: orpo\norpo_alpha: 0.1\n"
                     : "rl: simpo\nrl_beta: 2.0\nsimpo_gamma: 0.5\ncpo_alpha: " + std::to_string(cpo_alpha) + "\n";
    write_preference_config(dir_ / (name + ".yaml"), base, dir_ / "adapter0", quant, keys, "out-" + name);
    const auto r = train(config::load_run_config(dir_ / (name + ".yaml"), {}));
    ASSERT_EQ(r.steps, 10);
    const auto ours = logged_steps(r.output_dir);
    const auto theirs =
        trl_logs((base / "base").string() + " " + (dir_ / "adapter0").string() + " " + (dir_ / "pairs.jsonl").string() +
                 " " + tokenizer.string() + " " + quant + " 10 0.002 3 " +
                 (rl == "orpo" ? "0.1 orpo 64" : "2.0 simpo 64 0.5 " + std::to_string(cpo_alpha)));
    ASSERT_EQ(ours.size(), 10u);
    ASSERT_EQ(theirs.size(), 10u);
    const double beta = rl == "orpo" ? 0.1 : 2.0;
    for (size_t i = 0; i < 10; ++i) {
      std::vector<std::string> keys = {"loss"};
      for (const auto& key : preference_metric_names(rl)) keys.push_back(key);
      for (const auto& key : keys) {
        ASSERT_TRUE(theirs[i].contains(key)) << key;
        const double a = ours[i].at(key).get<double>(), b = theirs[i].at(key).get<double>();
        const double scale = tolerance_scale(key, theirs[i], beta, "");
        EXPECT_NEAR(a, b, (quant == "nf4" ? 1e-3 : 2e-5) * scale + 1e-6) << key << " at step " << i + 1;
      }
    }
    EXPECT_LT(ours.back().at("loss").get<double>(), ours.front().at("loss").get<double>());
  }
}

// Held-out pairs (val_set_size) are evaluated by the run's objective at eval_steps: eval_loss and
// TRL's metrics with the prefix eval_ follow DPOTrainer's and ORPOTrainer's evaluation of the same
// pairs (those qtrain holds out, given to TRL as its eval_dataset) at both evaluations, within the
// training comparison's float32 tolerance; the training steps see only the other pairs.
TEST_F(Trainer, HeldOutPairsAreEvaluatedAsTrlEvaluatesThem) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  at::manual_seed(10);
  write_pairs(
      dir_ / "pairs.jsonl", 6, [](int i) { return 9 - i; }, [](int i) { return 9 - i; });
  write_zero_adapter(base, dir_ / "adapter0");
  // The pairs qtrain holds out (val_set_size 2, seed 3), written apart for TRL.
  const auto held_out = data::held_out_rows(6, 2, 3);
  {
    std::ifstream in(dir_ / "pairs.jsonl");
    std::ofstream train_part(dir_ / "train.jsonl"), eval_part(dir_ / "eval.jsonl");
    std::string line;
    for (size_t i = 0; std::getline(in, line); ++i) (held_out[i] ? eval_part : train_part) << line << "\n";
  }
  const fs::path tokenizer = fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3";
  for (const std::string rl : {"dpo", "orpo"}) {
    SCOPED_TRACE(rl);
    const auto name = "eval-" + rl;
    write_preference_config(dir_ / (name + ".yaml"),
                            base,
                            dir_ / "adapter0",
                            "fp32",
                            "rl: " + rl + "\nrl_beta: 0.1\norpo_alpha: 0.1\nval_set_size: 2\neval_steps: 5\n",
                            "out-" + name);
    const auto r = train(config::load_run_config(dir_ / (name + ".yaml"), {}));
    std::vector<nlohmann::json> ours;
    std::ifstream in(r.output_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("eval_loss")) ours.push_back(j);
    }
    std::vector<nlohmann::json> theirs;
    for (const auto& j :
         trl_logs((base / "base").string() + " " + (dir_ / "adapter0").string() + " " +
                  (dir_ / "train.jsonl").string() + " " + tokenizer.string() + " fp32 10 0.002 3 0.1 " +
                  (rl == "dpo" ? "sigmoid" : "orpo") + " 64 --eval " + (dir_ / "eval.jsonl").string() + " 5")) {
      if (j.contains("eval_loss")) theirs.push_back(j);
    }
    ASSERT_EQ(ours.size(), 2u);
    ASSERT_EQ(theirs.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(ours[i].at("step"), theirs[i].at("step"));
      std::vector<std::string> keys = {"eval_loss"};
      for (const auto& key : preference_metric_names(rl)) keys.push_back("eval_" + key);
      for (const auto& key : keys) {
        ASSERT_TRUE(theirs[i].contains(key)) << key;
        const double a = ours[i].at(key).get<double>(), b = theirs[i].at(key).get<double>();
        const double scale = tolerance_scale(key, theirs[i], 0.1, "eval_");
        EXPECT_NEAR(a, b, 2e-5 * scale + 1e-6) << key << " at evaluation " << i + 1;
      }
    }
  }
}

// KTO's metrics travel with counts (Note [KTO loss]): each logged value is its sum over its count,
// one without a count is left out, and the progress line shows what is logged; the others' values
// are logged as they are.
TEST(PreferenceMetrics, KtosAreSumsOverTheirCountsAndAbsentWithoutOne) {
  // kl, rewards/chosen, rewards/rejected, rewards/margins, logps/chosen, logps/rejected, logits/*,
  // entropy, then their counts: the window's micro-batches had no undesirable row.
  const std::vector<double> values = {0.3, 0.4, 0, 0, -12, 0, 0.25, 0, 9, 2, 2, 0, 0, 2, 0, 2, 0, 2};
  const auto logged = preference_metrics("kto", values, "eval_");
  const std::vector<std::pair<std::string, double>> expected = {{"eval_kl", 0.15},
                                                                {"eval_rewards/chosen", 0.2},
                                                                {"eval_logps/chosen", -6},
                                                                {"eval_logits/chosen", 0.125},
                                                                {"eval_entropy", 4.5}};
  EXPECT_EQ(logged, expected);
  EXPECT_EQ(preference_progress(logged, "eval_"), " | kl 0.1500");
  EXPECT_THROW(preference_metrics("kto", {1.0}, ""), c10::Error);
  const auto dpo = preference_metrics("dpo", {1, 2, 0.5, 3, 4, 5, 6, 7, 8, 0.25}, "");
  ASSERT_EQ(dpo.size(), 10u);
  EXPECT_EQ(dpo[9], (std::pair<std::string, double>{"mean_token_accuracy", 0.25}));
  EXPECT_EQ(dpo[3], (std::pair<std::string, double>{"rewards/margins", 3}));
  EXPECT_EQ(preference_progress(dpo, ""), " | margin 3.0000 | acc 0.50");
}

// rl: kto against TRL's KTOTrainer (scripts/reference/kto_reference.py) on the same pre-tokenized
// rows in file order, from the same adapter with B = 0: 8 training rows, micro-batches of 4 with 2
// accumulated, the first micro-batch all desirable (so it has no rejected metrics and TRL's
// rewards/margins averages the second alone) and the second mixed; the loss and every metric TRL
// logs (a metric absent from its log absent from ours) at each of 10 steps, float32 with equal and
// unequal weights, and NF4, and with precompute_ref_log_probs (3 rows per precompute forward, as
// TRL's precompute_ref_batch_size), and with kto_loss_type apo_zero_unpaired (TRL's loss_type, no
// KL term). At B = 0 the log-ratios and kl are 0 and each row's loss is its weight / 2. With 4 more rows held out,
// eval_loss and the eval_ metrics follow TRL's evaluation, and a resumed run continues bitwise. Tolerances as the DPO
// test's.
TEST_F(Trainer, KtoFollowsTrlsKtoTrainerStepForStep) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  write_zero_adapter(base, dir_ / "adapter0");
  const fs::path tokenizer = fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3";
  struct Case {
    std::string quant;
    double desirable_weight, undesirable_weight;
    bool held_out;
    int precompute;  // precompute_ref_batch_size, or 0 for a reference forward per micro-batch
    std::string loss_type = "kto";
  };
  for (const auto& [quant, dw, uw, held_out, precompute, loss_type] :
       std::vector<Case>{{"fp32", 1.0, 1.0, true, 0},
                         {"fp32", 1.3, 0.7, false, 0},
                         {"nf4", 1.0, 1.0, false, 0},
                         {"fp32", 1.0, 1.0, false, 3},
                         {"fp32", 1.3, 0.7, false, 0, "apo_zero_unpaired"}}) {
    const auto name = "kto-" + quant + "-" + std::to_string(dw) + "-" + std::to_string(precompute) + "-" + loss_type;
    SCOPED_TRACE(name);
    // Rows 0-3 desirable, then desirable and undesirable in turn; the held-out case's 4 more rows
    // leave 8 to train on.
    at::manual_seed(11);
    const int rows = held_out ? 12 : 8;
    const auto is_eval = data::held_out_rows(static_cast<size_t>(rows), held_out ? 4 : 0, 3);
    std::vector<double> weights;  // the training rows' weights, in file order
    {
      std::ofstream all(dir_ / "pairs.jsonl"), eval_part(dir_ / "eval.jsonl"), train_part(dir_ / "train.jsonl");
      for (int i = 0; i < rows; ++i) {
        auto ids = [&](int64_t length) {
          const auto t = at::randint(0, 160, {length}, at::kLong);
          return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + length);
        };
        const auto line =
            nlohmann::json{
                {"prompt_ids", ids(3 + i % 3)}, {"completion_ids", ids(2 + i % 4)}, {"label", i < 4 || i % 2 == 0}}
                .dump();
        all << line << "\n";
        (is_eval[static_cast<size_t>(i)] ? eval_part : train_part) << line << "\n";
        if (!is_eval[static_cast<size_t>(i)]) weights.push_back(i < 4 || i % 2 == 0 ? dw : uw);
      }
    }
    std::ostringstream keys;
    keys << "rl: kto\nrl_beta: 0.1\ngradient_accumulation_steps: 2\nkto_desirable_weight: " << dw
         << "\nkto_undesirable_weight: " << uw << "\n"
         << (held_out ? "val_set_size: 4\neval_steps: 5\n" : "")
         << (precompute > 0 ? "precompute_ref_log_probs: true\nprecompute_ref_batch_size: 3\n" : "")
         << "kto_loss_type: " << loss_type << "\n";
    write_preference_config(dir_ / (name + ".yaml"), base, dir_ / "adapter0", quant, keys.str(), "out-" + name);
    const auto r = train(config::load_run_config(dir_ / (name + ".yaml"), {}));
    ASSERT_EQ(r.steps, 10);
    std::ostringstream args;
    args << (base / "base").string() << " " << (dir_ / "adapter0").string() << " " << (dir_ / "train.jsonl").string()
         << " " << tokenizer.string() << " " << quant << " 10 0.002 3 0.1 64 4 2 " << dw << " " << uw;
    if (held_out) args << " --eval " << (dir_ / "eval.jsonl").string() << " 5";
    if (precompute > 0) args << " --precompute " << precompute;
    args << " --loss-type " << loss_type;
    std::vector<nlohmann::json> theirs, theirs_eval, ours_eval;
    for (const auto& j : trl_logs(args.str(), "kto_reference.py")) {
      (j.contains("eval_loss") ? theirs_eval : theirs).push_back(j);
    }
    {
      std::ifstream in(r.output_dir / "metrics.jsonl");
      for (std::string line; std::getline(in, line);) {
        if (const auto j = nlohmann::json::parse(line); j.contains("eval_loss")) ours_eval.push_back(j);
      }
    }
    const auto ours = logged_steps(r.output_dir);
    ASSERT_EQ(ours.size(), 10u);
    ASSERT_EQ(theirs.size(), 10u);
    const auto compare = [&](const nlohmann::json& mine, const nlohmann::json& trl, const std::string& prefix) {
      std::vector<std::string> names = {prefix + "loss"};
      for (const auto& key : preference_metric_names("kto")) names.push_back(prefix + key);
      for (const auto& key : names) {
        ASSERT_EQ(mine.contains(key), trl.contains(key)) << key;
        if (!trl.contains(key)) continue;
        const double a = mine.at(key).get<double>(), b = trl.at(key).get<double>();
        const double scale = tolerance_scale(key, trl, 0.1, prefix);
        EXPECT_NEAR(a, b, (quant == "nf4" ? 1e-3 : 2e-5) * scale + 1e-6) << key << " at step " << mine.at("step");
      }
    };
    // The first step's: the mean over its two micro-batches of the mean over their rows of weight / 2.
    ASSERT_EQ(weights.size(), 8u);
    double first = 0;
    for (size_t i = 0; i < 8; ++i) first += weights[i] / 2 / 4 / 2;
    EXPECT_NEAR(ours[0].at("loss").get<double>(), first, 1e-6);
    for (size_t i = 0; i < 10; ++i) compare(ours[i], theirs[i], "");
    EXPECT_LT(ours.back().at("loss").get<double>(), ours.front().at("loss").get<double>());
    EXPECT_GT(ours.back().at("rewards/margins").get<double>(), 0.0);
    if (!held_out) continue;
    ASSERT_EQ(ours_eval.size(), 2u);
    ASSERT_EQ(theirs_eval.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(ours_eval[i].at("step"), theirs_eval[i].at("step"));
      compare(ours_eval[i], theirs_eval[i], "eval_");
    }
    // A run resumed from its step-4 checkpoint continues bitwise.
    const auto resumed = train(config::load_run_config(
        dir_ / (name + ".yaml"),
        {"output_dir=out-kto-resumed", "resume_from_checkpoint=" + (r.output_dir / "checkpoint-4").string()}));
    const auto b = losses(resumed.output_dir);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(b[i], ours[4 + i].at("loss").get<double>()) << "step " << i + 5;
  }
}

// DoRA (an adapter peft wrote with use_dora): every step's loss follows transformers + peft's on
// float32 and NF4 bases, the magnitudes trained beside A and B by the same AdamW, clipping and
// schedule; a run resumed from a checkpoint continues bitwise. A new DoRA adapter
// (peft_use_dora) trains and is saved with its magnitudes. Tolerance as
// LossesMatchTransformersAndPeftForFloatAndNf4Bases.
TEST_F(Trainer, DoraFollowsPeftStepForStepAndResumes) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  const std::string adapter = "lora_model_dir=" + (base / "adapter_dora").string();
  for (const std::string quant : {"fp32", "nf4"}) {
    const auto full = train(config(
        "dora-" + quant, {adapter, quant == "nf4" ? "load_in_4bit=true" : "load_in_4bit=false", "save_steps=8"}));
    const auto ours = losses(full.output_dir);
    const auto theirs = python_losses((base / "base").string() + " " + (base / "adapter_dora").string() + " " +
                                      (dir_ / "data.jsonl").string() + " " + quant + " 20 0.002 3");
    ASSERT_EQ(ours.size(), 20u);
    ASSERT_EQ(theirs.size(), 20u);
    for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(ours[i], theirs[i], 2e-4 * theirs[i]) << quant << " step " << i + 1;
    const auto trained = io::load_peft_adapter(full.output_dir), start = io::load_peft_adapter(base / "adapter_dora");
    ASSERT_TRUE(trained.config.use_dora);
    for (const auto& [name, a] : trained.adapters) {
      EXPECT_FALSE(at::equal(a.magnitude, start.adapters.at(name).magnitude)) << name << ": the magnitude trained";
    }
    if (quant != "fp32") continue;
    const auto resumed = train(
        config("dora-resumed", {adapter, "resume_from_checkpoint=" + (full.output_dir / "checkpoint-8").string()}));
    const auto b = losses(resumed.output_dir);
    ASSERT_EQ(b.size(), 12u);
    for (size_t i = 0; i < 12; ++i) EXPECT_EQ(ours[8 + i], b[i]) << "step " << 9 + i;
    for (const auto& [name, a] : io::load_peft_adapter(resumed.output_dir).adapters) {
      EXPECT_TRUE(test::bitwise_equal(a.magnitude, trained.adapters.at(name).magnitude)) << name;
    }
  }
  const auto fresh = train(config("dora-new", {"lora_model_dir=", "peft_use_dora=true", "max_steps=4"}));
  const auto m = losses(fresh.output_dir);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_LT(m.back(), m.front());
  const auto saved = io::load_peft_adapter(fresh.output_dir);
  EXPECT_TRUE(saved.config.use_dora);
  for (const auto& [name, a] : saved.adapters) EXPECT_TRUE(a.magnitude.defined()) << name;
}

// LoRA+ (loraplus_lr_ratio): lora_B at 16 times the learning rate, as peft's
// create_loraplus_optimizer groups the parameters; every step's loss follows transformers + peft's
// and differs from the run without it (tolerance as LossesMatchTransformersAndPeftForFloatAndNf4Bases).
TEST_F(Trainer, LoraPlusFollowsPeftsOptimizerStepForStep) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = test::model_fixture("llama");
  const auto plus = train(config("loraplus", {"loraplus_lr_ratio=16", "loraplus_lr_embedding=1e-6"}));
  const auto ours = losses(plus.output_dir);
  const auto theirs = python_losses((base / "base").string() + " " + (base / "adapter").string() + " " +
                                    (dir_ / "data.jsonl").string() + " fp32 20 0.002 3 16");
  ASSERT_EQ(ours.size(), 20u);
  ASSERT_EQ(theirs.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(ours[i], theirs[i], 2e-4 * theirs[i]) << "step " << i + 1;
  const auto plain = losses(train(config("plain")).output_dir);
  EXPECT_GT(std::abs(plain.back() - ours.back()), 1e-2 * plain.back()) << "the ratio must change the run";
}

// A new adapter of rank 64 on the fixture's 64-wide layers: q_proj's lora_A [64, 64] and
// down_proj's [64, 96] reach AdamW8bit's 4096-element threshold (8-bit state), k_proj's lora_B
// [32, 64] does not (float32 state). Checkpoints record the optimizer; resuming continues the
// 8-bit run exactly, and resuming it with the 32-bit AdamW is refused, naming both.
TEST_F(Trainer, AdamW8bitRunResumesBitwiseAndRefusesAnotherOptimizer) {
  const std::vector<std::string> sets = {
      "lora_model_dir=", "lora_r=64", "lora_alpha=16", "optimizer=adamw_8bit", "max_steps=8", "save_steps=4"};
  const auto full = train(config("eight", sets));
  const auto checkpoint = full.output_dir / "checkpoint-4";
  ASSERT_TRUE(fs::exists(checkpoint));
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(checkpoint / "trainer_state.json")).at("optimizer"), "adamw_bnb_8bit");
  int64_t codes = 0;
  for (const auto& [name, t] : load_checkpoint(checkpoint).optimizer) codes += t.scalar_type() == at::kByte;
  EXPECT_GT(codes, 0) << "no 8-bit state in the checkpoint";

  auto resume_sets = sets;
  resume_sets.push_back("resume_from_checkpoint=" + checkpoint.string());
  const auto resumed = train(config("eight-resumed", resume_sets));
  const auto a = losses(full.output_dir), b = losses(resumed.output_dir);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(a[4 + i], b[i]) << "step " << 5 + i;
  const auto fa = io::load_peft_adapter(full.output_dir), fb = io::load_peft_adapter(resumed.output_dir);
  for (const auto& [name, adapter] : fa.adapters) {
    EXPECT_TRUE(test::bitwise_equal(adapter.a, fb.adapters.at(name).a)) << name;
    EXPECT_TRUE(test::bitwise_equal(adapter.b, fb.adapters.at(name).b)) << name;
  }

  auto other = resume_sets;
  other[3] = "optimizer=adamw_torch";
  try {
    train(config("eight-as-32", other));
    FAIL() << "resumed 8-bit optimizer state with the 32-bit AdamW";
  } catch (const c10::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the checkpoint's optimizer state was written by adamw_bnb_8bit but this run's optimizer "
                        "is adamw_torch"),
              std::string::npos)
        << what;
  }

  // The checkpoint's adapters do not fit a run of another rank: refused naming the file, the
  // tensor and both shapes.
  auto narrower = resume_sets;
  narrower[1] = "lora_r=32";
  try {
    train(config("eight-as-r32", narrower));
    FAIL() << "resumed rank-64 adapters into a rank-32 run";
  } catch (const c10::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((checkpoint / "adapter_model.safetensors").string() +
                        ": 'base_model.model.model.layers.0.mlp.down_proj.lora_A.weight' is [64, 96] and lora_B [64, "
                        "64], but this run's model needs [32, 96] and [64, 32]; the checkpoint belongs to a run with "
                        "another base model or lora_r"),
              std::string::npos)
        << what;
  }
}

TEST_F(Trainer, NonFiniteStepsAreSkippedAndTooManyStopTheRun) {
  // A learning rate of 1e30 without clipping blows the adapter up after the first update; every
  // later step then has a non-finite loss, is skipped, and the tenth in a row ends the run. The
  // run config refuses such a rate (run_limits.h), so it is set on the parsed config. Returns the
  // error that stopped the run.
  const auto blown_up = [&](const std::string& name, const std::vector<std::string>& sets) -> std::string {
    auto keys = sets;
    keys.insert(keys.end(), {"warmup_steps=0", "max_grad_norm=0"});
    auto c = config(name, keys);
    c.learning_rate = 1e30;
    try {
      train(c);
    } catch (const c10::Error& e) {
      const std::string msg = e.what_without_backtrace();
      EXPECT_NE(msg.find("10 steps in a row had a non-finite loss or gradient"), std::string::npos) << msg;
      return msg;
    }
    ADD_FAILURE() << "the run did not stop";
    return "";
  };
  const auto msg = blown_up("blowup", {"save_steps=1"});
  EXPECT_NE(msg.find("Lower learning_rate"), std::string::npos) << msg;
  // Nothing written before the stop is lost: the checkpoints of the skipped steps load.
  const auto all = list_checkpoints(dir_ / "out-blowup");
  ASSERT_GE(all.size(), 2u);
  EXPECT_GT(load_checkpoint(all.back()).state.skipped_steps, 0);
  // Logging and saving rarely, the host learns of each skip one step late (Note [Steps decided on
  // the device]): the tenth in a row still stops the run, and the message names its step. With
  // each skip counted one step late, its step counter taken back before the next update, the
  // optimizer's count in a checkpoint is the applied steps: global_step minus skipped_steps.
  const auto late_msg = blown_up("blowup-late", {"logging_steps=100", "save_steps=5"});
  EXPECT_NE(late_msg.find(", step 11)"), std::string::npos) << late_msg;
  const auto late = list_checkpoints(dir_ / "out-blowup-late");
  ASSERT_GE(late.size(), 2u);
  for (const auto& ck : late) {
    const auto s = load_checkpoint(ck);
    EXPECT_EQ(s.optimizer.at("step").item<int64_t>(), s.state.global_step - s.state.skipped_steps) << ck;
  }
}

// `qtrain train cfg --set a --set b` in a child process.
pid_t spawn_train(const fs::path& cfg, const std::string& a, const std::string& b) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    execl(QTRAIN_BINARY,
          QTRAIN_BINARY,
          "train",
          cfg.c_str(),
          "--set",
          a.c_str(),
          "--set",
          b.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

TEST_F(Trainer, KillDuringCheckpointWritesLeavesLoadableCheckpoints) {
  const pid_t pid = spawn_train(config_file("killed"), "save_steps=1", "max_steps=400");
  const auto out = dir_ / "out-killed";
  // Kill as soon as two checkpoints exist: the third is then being written or about to be.
  for (int i = 0; i < 600 && list_checkpoints(out).size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto all = list_checkpoints(out);
  ASSERT_GE(all.size(), 2u);
  for (const auto& ck : all) {
    const auto c = load_checkpoint(ck);
    EXPECT_GT(c.state.global_step, 0) << ck;
    EXPECT_EQ(c.adapters.size(), 3u * 7u) << ck;
  }
}

TEST_F(Trainer, SigintSavesACheckpointAndExits130) {
  const pid_t pid = spawn_train(config_file("interrupted"), "max_steps=400", "save_total_limit=1");
  const auto metrics = dir_ / "out-interrupted" / "metrics.jsonl";
  for (int i = 0; i < 600 && (!fs::exists(metrics) || fs::file_size(metrics) == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const auto all = list_checkpoints(dir_ / "out-interrupted");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_GT(load_checkpoint(all[0]).state.global_step, 0);
}

// The load-balancing loss of a MoE model (model_config: output_router_logits) in a step of two
// micro-batches: as the HF Trainer, each micro-batch adds coef times its own aux loss, so the
// first step's loss (same weights either way) exceeds the cross-entropy alone by coef times the
// sum of the two, which is 2 * coef * the logged mean aux_loss.
TEST_F(Trainer, LoadBalancingLossIsAddedPerMicroBatchAndLogged) {
  const auto base = test::moe_fixture("mixtral");
  auto moe_config = [&](const std::string& name, bool aux) {
    std::ofstream(dir_ / (name + ".yaml"))
        << "base_model: " << (base / "base").string() << "\n"
        << "lora_model_dir: " << (base / "adapter").string() << "\n"
        << "lora_target_modules: [q_proj, k_proj, v_proj, o_proj]\n"
        << "lora_target_parameters: [mlp.experts.gate_up_proj, mlp.experts.down_proj]\n"
        << "datasets:\n  - path: data.jsonl\n"
        << "sequence_len: 64\nmicro_batch_size: 3\n"
        << "gradient_accumulation_steps: 2\nmax_steps: 2\n"
        << "learning_rate: 0.002\ndevice: cpu\nlogging_steps: 1\nseed: 3\n"
        << "model_config: {output_router_logits: " << (aux ? "true" : "false") << ", router_aux_loss_coef: 0.5}\n"
        << "output_dir: out-" << name << "\n";
    return config::load_run_config(dir_ / (name + ".yaml"), {});
  };
  const auto with = train(moe_config("aux", true));
  const auto without = train(moe_config("ce", false));
  std::vector<nlohmann::json> rows;
  std::ifstream in(with.output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u);
  const double aux = rows[0].at("aux_loss").get<double>();
  EXPECT_GT(aux, 3.0 * 0.99);  // top_k 3 when perfectly balanced, more otherwise
  const auto ce = losses(without.output_dir);
  ASSERT_EQ(ce.size(), 2u);
  EXPECT_NEAR(rows[0].at("loss").get<double>(), ce[0] + 2 * 0.5 * aux, 1e-5);
  std::ifstream plain(without.output_dir / "metrics.jsonl");
  std::string first;
  std::getline(plain, first);
  EXPECT_FALSE(nlohmann::json::parse(first).contains("aux_loss"));
}

}  // namespace
}  // namespace qtrain::engine::train
