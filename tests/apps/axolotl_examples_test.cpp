// axolotl's example configs (tests/data/axolotl_examples/, copied with keys and values unchanged)
// with only base_model and the dataset path made local. The Llama 3, Mistral, Qwen2 and Qwen3
// LoRA/QLoRA examples on alpaca data (lora-8b.yml's embeddings and head trained in full) load with no problem and train
// end to end on a tiny random model of their family with that family's stand-in tokenizer (max_steps 2, sequence_len
// 128 and device cpu set from the command line to keep the test short); their evaluations and checkpoints come at the
// steps axolotl's evals_per_epoch / saves_per_epoch give, and Mistral's loss watchdog stops a run whose loss stays
// high. Gemma 2's and Gemma 4 26B-A4B's (on a tiny Gemma 4 MoE shaped as the release) train; Gemma 3's reports its one
// remaining problem with its place.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/model/init_model.h"
#include "engine/model/model_config.h"
#include "tests/temp_dir.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;

// stdout and stderr of `cmd`, and its exit status.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  return {pclose(p), out};
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// The training losses and the evaluations a run logged in its metrics.jsonl.
struct Logged {
  std::vector<double> losses;
  int evaluations = 0;
};
Logged logged(const fs::path& out) {
  Logged m;
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) m.losses.push_back(j.at("loss").get<double>());
    m.evaluations += j.contains("eval_loss") ? 1 : 0;
  }
  return m;
}

// `n` finite losses.
void expect_finite_losses(const Logged& m, size_t n, const std::string& log) {
  EXPECT_EQ(m.losses.size(), n) << log;
  for (const double loss : m.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
}

class AxolotlExamples : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fixtures = std::getenv("QTRAIN_FIXTURES");
    if (!fixtures) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
    fixtures_ = fixtures;
    dir_ = test::fresh_test_dir(/*create=*/true);
    // 40 short alpaca rows (some with an input), and 40 conversations both ShareGPT-style
    // (conversations/from/value) and in the default layout (messages/role/content).
    std::ofstream alpaca(dir_ / "alpaca.jsonl");
    std::ofstream chat(dir_ / "chat.jsonl");
    std::ofstream messages(dir_ / "messages.jsonl");
    const std::vector<std::string> colours = {"red", "green", "blue", "black", "white"};
    for (int i = 0; i < 40; ++i) {
      const std::string colour = colours[i % colours.size()];
      nlohmann::json row = {{"instruction", "Name colour number " + std::to_string(i % 5) + "."},
                            {"output", "The colour is " + colour + "."}};
      if (i % 3 == 0) row["input"] = "Answer in one sentence.";
      alpaca << row.dump() << "\n";
      chat << nlohmann::json{{"conversations",
                              {{{"from", "human"}, {"value", "Name colour number " + std::to_string(i % 5)}},
                               {{"from", "gpt"}, {"value", colour}}}}}
                  .dump()
           << "\n";
      messages << nlohmann::json{{"messages",
                                  {{{"role", "user"}, {"content", "Name colour number " + std::to_string(i % 5)}},
                                   {{"role", "assistant"}, {"content", colour}}}}}
                      .dump()
               << "\n";
    }
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  // A tiny random model of `arch` with the stand-in tokenizer of its family.
  fs::path model(engine::model::Architecture arch, const std::string& tokenizer) const {
    const auto folder = dir_ / ("model-" + engine::model::architecture_name(arch));
    if (fs::exists(folder)) return folder;
    auto config = engine::model::preset_config(arch, arch == engine::model::Architecture::gemma4 ? "tiny-moe" : "tiny");
    config.vocab_size = 4096;  // every stand-in tokenizer has fewer ids
    engine::model::write_random_model(folder, config, /*seed=*/7);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fixtures_ / "tokenizers" / tokenizer / f, folder / f);
    }
    return folder;
  }

  // A tiny random Gemma 4 MoE shaped as Gemma 4 26B-A4B's release is: a Gemma4ForConditionalGeneration
  // folder (config.json's text_config, the decoder's tensors under model.language_model.), with
  // the Gemma 4 stand-in tokenizer (its turn, thinking, tool and media tokens).
  fs::path gemma4_multimodal() const {
    const auto text = model(engine::model::Architecture::gemma4, "gemma4");
    const auto folder = dir_ / "model-gemma4-multimodal";
    if (fs::exists(folder)) return folder;
    fs::create_directories(folder);
    auto text_config = nlohmann::json::parse(std::ifstream(text / "config.json"));
    text_config.erase("architectures");
    std::ofstream(folder / "config.json") << nlohmann::json{
        {"architectures", {"Gemma4ForConditionalGeneration"}},
        {"model_type", "gemma4"},
        {"text_config", text_config}}.dump(2);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [name, t] : engine::io::safetensors_load(text / "model.safetensors")) {
      if (name.starts_with("model.")) tensors.emplace_back("model.language_model." + name.substr(6), t);
    }
    engine::io::safetensors_save(folder / "model.safetensors", tensors);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(text / f, folder / f);
    return folder;
  }

  // The example with its placeholders filled, written beside the data; returns its path.
  fs::path example(const std::string& name, const fs::path& base_model, const std::string& data) const {
    const auto text = read_text(fs::path(QTRAIN_SOURCE_DIR) / "tests" / "data" / "axolotl_examples" / name);
    EXPECT_NE(text.find("BASE_MODEL"), std::string::npos) << name;
    const auto file = dir_ / replaced(name, "/", "_");
    std::ofstream(file) << replaced(replaced(text, "BASE_MODEL", base_model.string()), "DATASET", data);
    return file;
  }

  // The problems of loading `file` with `overrides`, one message each; empty: it loads.
  static std::vector<std::string> problems(const fs::path& file, const std::vector<std::string>& overrides = {}) {
    try {
      engine::config::load_run_config(file, overrides);
      return {};
    } catch (const c10::Error& e) {
      const std::string message = e.msg();
      const std::string many = " problems in the run config; fix them all before the run:\n  ";
      const size_t at = message.find(many);
      if (at == std::string::npos) return {message};
      std::vector<std::string> out;
      std::stringstream rest(message.substr(at + many.size()));
      for (std::string line; std::getline(rest, line);) out.push_back(line.substr(line.find_first_not_of(' ')));
      return out;
    }
  }

  fs::path fixtures_, dir_;
};

struct Trained {
  const char* file;
  engine::model::Architecture arch;
  const char* tokenizer;
  const char* data;  // alpaca.jsonl or messages.jsonl
  // From the file: with max_steps 2, evals_per_epoch n and num_epochs e give an evaluation every
  // ceil(2 / (n * e)) = 1 step when n * e > 1 (none when val_set_size is 0 or evals_per_epoch is
  // unset), and saves_per_epoch 1 a checkpoint every ceil(2 / e) steps when e > 1, else at the
  // epoch's end (past step 2 here).
  int evaluations;
  std::vector<int> checkpoints;
};

TEST_F(AxolotlExamples, LlamaMistralAndQwenExamplesLoadAndTrain) {
  using engine::model::Architecture;
  const std::vector<Trained> examples = {
      {"llama-3/qlora.yml", Architecture::llama, "llama3", "alpaca.jsonl", 0, {1, 2}},  // num_epochs 4, val_set_size 0
      {"llama-3/lora-1b.yml", Architecture::llama, "llama3", "alpaca.jsonl", 2, {}},    // num_epochs 1
      // chat_template: llama3, num_epochs 4, evals_per_epoch 4.
      {"llama-3/instruct-lora-8b.yml", Architecture::llama, "llama3", "messages.jsonl", 2, {1, 2}},
      // load_in_8bit, lora_modules_to_save: [embed_tokens, lm_head], num_epochs 4, evals_per_epoch 4.
      {"llama-3/lora-8b.yml", Architecture::llama, "llama3", "alpaca.jsonl", 2, {1, 2}},
      {"mistral/qlora.yml", Architecture::mistral, "mistral_v01", "alpaca.jsonl", 2, {}},
      {"mistral/lora.yml", Architecture::mistral, "mistral_v01", "alpaca.jsonl", 2, {}},  // load_in_8bit
      {"qwen2/qlora-fsdp.yaml", Architecture::qwen2, "qwen3", "alpaca.jsonl", 2, {1, 2}},
      {"qwen3/8b-lora-fused-attn.yaml", Architecture::qwen3, "qwen3", "alpaca.jsonl", 0, {}},  // no evals_per_epoch
      // split: train[:20%] (8 rows, one step per epoch), chat_template: qwen3, gradient_checkpointing:
      // offload, val_set_size 0.
      {"qwen3/32b-qlora.yaml", Architecture::qwen3, "qwen3", "chat.jsonl", 0, {1, 2}},
  };
  for (const auto& e : examples) {
    SCOPED_TRACE(e.file);
    const auto config = example(e.file, model(e.arch, e.tokenizer), (dir_ / e.data).string());
    EXPECT_EQ(problems(config), std::vector<std::string>{});
    const auto out = dir_ / ("out-" + config.stem().string());
    const auto [status, log] =
        run(std::string(QTRAIN_BINARY) + " train " + config.string() +
            " --set max_steps=2 --set sequence_len=128 --set device=cpu --set output_dir=" + out.string());
    ASSERT_EQ(status, 0) << log;
    // The speed switches of the file are named in one line.
    EXPECT_NE(log.find("accepted and ignored (they do not change what is trained): "), std::string::npos) << log;
    const auto m = logged(out);
    expect_finite_losses(m, 2, log);
    EXPECT_EQ(m.evaluations, e.evaluations) << log;
    for (int step = 1; step <= 2; ++step) {
      const bool expected = std::find(e.checkpoints.begin(), e.checkpoints.end(), step) != e.checkpoints.end();
      EXPECT_EQ(fs::exists(out / ("checkpoint-" + std::to_string(step))), expected) << step << "\n" << log;
    }
    EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors")) << log;
  }
  // lora-8b.yml trains the embeddings and the head in full, saved beside the adapter as peft saves
  // its modules_to_save.
  const auto adapter = engine::io::SafetensorsFile::open(dir_ / "out-llama-3_lora-8b" / "adapter_model.safetensors");
  EXPECT_TRUE(adapter.contains("base_model.model.model.embed_tokens.weight"));
  EXPECT_TRUE(adapter.contains("base_model.model.lm_head.weight"));
}

// axolotl's Mistral DPO QLoRA example (rl: dpo, type chat_template.default with field_messages
// conversation, chat_template chatml, chatml's special tokens as bos and eos, embeddings and head
// trained in full, lora_dropout 0.2 that TRL turns off) trains on preference rows in the layout of
// its dataset, and evaluates its held-out pairs (val_set_size 0.05) by the DPO loss and TRL's
// eval_ metrics.
TEST_F(AxolotlExamples, TheMistralDpoExampleTrainsOnItsPreferenceRows) {
  {
    std::ofstream pairs(dir_ / "dpo.jsonl");
    const std::vector<std::string> colours = {"red", "green", "blue", "black", "white"};
    for (int i = 0; i < 40; ++i) {
      pairs << nlohmann::json{{"conversation",
                               {{{"role", "user"}, {"content", "Name colour number " + std::to_string(i % 5)}}}},
                              {"chosen", {{"role", "assistant"}, {"content", colours[i % 5]}}},
                              {"rejected", {{"role", "assistant"}, {"content", colours[(i + 1) % 5]}}}}
                   .dump()
            << "\n";
    }
  }
  const auto config = example("mistral/dpo/mistral-dpo-qlora.yml",
                              model(engine::model::Architecture::mistral, "mistral_v01"),
                              (dir_ / "dpo.jsonl").string());
  EXPECT_EQ(problems(config), std::vector<std::string>{});
  const auto out = dir_ / "out-dpo";
  const auto [status, log] =
      run(std::string(QTRAIN_BINARY) + " train " + config.string() +
          " --set max_steps=2 --set sequence_len=128 --set device=cpu --set output_dir=" + out.string());
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("38 training pairs, 2 held out"), std::string::npos) << log;
  EXPECT_NE(log.find("rl: lora_dropout 0.2 is off while training"), std::string::npos) << log;
  const auto m = logged(out);
  expect_finite_losses(m, 2, log);
  EXPECT_EQ(m.evaluations, 2) << log;
  std::ifstream metrics(out / "metrics.jsonl");
  int with_rewards = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    with_rewards += j.contains("rewards/margins") || j.contains("eval_rewards/margins");
  }
  EXPECT_EQ(with_rewards, 4) << log;
  EXPECT_TRUE(fs::exists(out / "checkpoint-2")) << log;
  const auto adapter = engine::io::SafetensorsFile::open(out / "adapter_model.safetensors");
  EXPECT_TRUE(adapter.contains("base_model.model.lm_head.weight"));
}

// axolotl's Llama 3 KTO QLoRA example (rl: kto, rl_beta 0.5, kto_desirable_weight 0.2, type
// llama3.ultra, 8-bit AdamW, gradient checkpointing, micro-batches of 2) trains on rows in the
// layout of its dataset (argilla/ultrafeedback-binarized-preferences-cleaned-kto: prompt,
// completion, label), written as axolotl's KTO strategy writes them, with TRL's metrics.
TEST_F(AxolotlExamples, TheLlama3KtoExampleTrainsOnItsUnpairedRows) {
  {
    std::ofstream rows(dir_ / "kto.jsonl");
    const std::vector<std::string> colours = {"red", "green", "blue", "black", "white"};
    for (int i = 0; i < 12; ++i) {
      rows << nlohmann::json{{"prompt", "Name colour number " + std::to_string(i % 5)},
                             {"completion", colours[(i + i % 2) % 5]},
                             {"label", i % 3 != 0}}
                  .dump()
           << "\n";
    }
  }
  const auto config = example(
      "llama-3/qlora-1b-kto.yaml", model(engine::model::Architecture::llama, "llama3"), (dir_ / "kto.jsonl").string());
  EXPECT_EQ(problems(config), std::vector<std::string>{});
  const auto out = dir_ / "out-kto";
  const auto [status, log] =
      run(std::string(QTRAIN_BINARY) + " train " + config.string() +
          " --set max_steps=3 --set sequence_len=128 --set device=cpu --set output_dir=" + out.string());
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("12 KTO rows"), std::string::npos) << log;
  const auto m = logged(out);
  expect_finite_losses(m, 3, log);
  // 8 desirable rows at weight 0.2 against 4 undesirable at 1: TRL's advice is printed.
  EXPECT_NE(log.find("rl: kto: 8 desirable and 4 undesirable rows; TRL advises kto_desirable_weight in [0.5, "),
            std::string::npos)
      << log;
  // Every micro-batch of 2 rows in file order has a desirable row; the third (rows 4 and 5) has no
  // undesirable one, so its step logs no rejected metric, as TRL's.
  std::ifstream metrics(out / "metrics.jsonl");
  int with_margins = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    for (const char* key : {"kl", "rewards/chosen", "logps/chosen", "logits/chosen"}) {
      EXPECT_TRUE(j.contains(key)) << key << " in " << line;
    }
    EXPECT_EQ(j.contains("rewards/rejected"), j.contains("rewards/margins")) << line;
    with_margins += j.contains("rewards/margins");
  }
  EXPECT_EQ(with_margins, 2) << log;
}

// mistral/qlora.yml's loss_watchdog_threshold: 5.0 and patience 3 stop a run whose loss stays
// near ln(4096) = 8.3 (a random model): the end of step 4 sees the third high loss logged (steps
// 1 to 3), so step 4 is the last, as in axolotl; the adapter is saved.
TEST_F(AxolotlExamples, TheLossWatchdogStopsARunWhoseLossStaysHigh) {
  const auto config = example("mistral/qlora.yml",
                              model(engine::model::Architecture::mistral, "mistral_v01"),
                              (dir_ / "alpaca.jsonl").string());
  const auto out = dir_ / "out-watchdog";
  const auto [status, log] = run(std::string(QTRAIN_BINARY) + " train " + config.string() +
                                 " --set max_steps=10 --set val_set_size=0 --set sequence_len=128 --set device=cpu "
                                 "--set output_dir=" +
                                 out.string());
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("stopping at step 4: the loss was above loss_watchdog_threshold 5 for 3 logged steps in a row"),
            std::string::npos)
      << log;
  const auto m = logged(out);
  EXPECT_EQ(m.losses.size(), 4u) << log;
  for (const double loss : m.losses) EXPECT_GT(loss, 5.0);
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors")) << log;
}

// axolotl's Gemma 4 26B-A4B QLoRA example as it is (kernel switches, a regex lora_target_modules
// for model.language_model.*, expert LoRA, chat_template gemma4 with <turn|> as its eot token,
// split train[:10%], adamw_torch_8bit, activation offloading) trains a tiny random Gemma 4 MoE
// shaped as the release: every regex-named linear and both expert tensors get an adapter, and the
// 4 of the 40 conversations that train[:10%] selects are what it trains on.
TEST_F(AxolotlExamples, TheGemma4MoeExampleTrains) {
  const auto config = example("gemma4/26b-a4b-moe-qlora.yaml", gemma4_multimodal(), (dir_ / "chat.jsonl").string());
  EXPECT_EQ(problems(config), std::vector<std::string>{});
  const auto out = dir_ / "out-gemma4";
  const auto [status, log] =
      run(std::string(QTRAIN_BINARY) + " train " + config.string() +
          " --set device=cpu --set max_steps=2 --set sequence_len=128 --set output_dir=" + out.string());
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("use_scattermoe (ScatterMoE speeds up the Python stack's experts"), std::string::npos) << log;
  EXPECT_NE(log.find("optimizer: adamw_torch_8bit (torchao's 8-bit AdamW is not implemented"), std::string::npos)
      << log;
  EXPECT_NE(log.find("activation offloading: checkpointed layers' inputs wait in"), std::string::npos) << log;
  // train[:10%] of 40 rows: 4, and val_set_size 0.05 holds out one of them.
  EXPECT_NE(log.find("chat.jsonl: 4 rows"), std::string::npos) << log;
  expect_finite_losses(logged(out), 2, log);
  // The tiny model's 2 layers: q, k, v, o and the dense MLP's gate, up, down by the regex, and the
  // experts' gate_up and down, each with A and B.
  const auto adapter = engine::io::SafetensorsFile::open(out / "adapter_model.safetensors");
  int64_t linears = 0, experts = 0;
  for (const auto& t : adapter.tensors()) {
    EXPECT_TRUE(t.name.starts_with("base_model.model.model.language_model.layers.")) << t.name;
    (t.name.find(".experts.") != std::string::npos ? experts : linears) += 1;
  }
  EXPECT_EQ(experts, 2 * 2 * 2);
  EXPECT_GE(linears, 2 * 6 * 2) << "every regex-named projection has A and B";
}

// The Gemma 2 example as it is (chat_template: gemma, drop_system_message, <end_of_turn> as its
// eot token) trains a tiny random Gemma 2 with the Gemma 3 stand-in tokenizer.
TEST_F(AxolotlExamples, TheGemma2ExampleTrains) {
  const auto config =
      example("gemma2/qlora.yml", model(engine::model::Architecture::gemma2, "gemma3"), (dir_ / "chat.jsonl").string());
  const auto out = dir_ / "out-gemma2";
  const auto [status, log] =
      run(std::string(QTRAIN_BINARY) + " train " + config.string() +
          " --set device=cpu --set max_steps=2 --set sequence_len=128 --set output_dir=" + out.string());
  ASSERT_EQ(status, 0) << log;
  expect_finite_losses(logged(out), 2, log);
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors")) << log;
}

// gemma3/gemma-3-1b-qlora.yml's unfrozen_parameters name "^model.language_model.*" and
// "^lm_head.*": a text-only Gemma 3 with tied embeddings has neither, so (as in axolotl, where
// they would not match peft's names either) nothing is unfrozen; qtrain says so for each and
// trains the adapters, where axolotl would freeze them too.
TEST_F(AxolotlExamples, TheGemma3ExampleTrainsAndSaysItsUnfrozenPatternsMatchNothing) {
  const auto config = example("gemma3/gemma-3-1b-qlora.yml",
                              model(engine::model::Architecture::gemma3, "gemma3"),
                              (dir_ / "chat.jsonl").string());
  EXPECT_EQ(problems(config), std::vector<std::string>{});
  const auto out = dir_ / "out-gemma3";
  const auto [status, log] =
      run(std::string(QTRAIN_BINARY) + " train " + config.string() +
          " --set device=cpu --set max_steps=2 --set sequence_len=128 --set output_dir=" + out.string());
  ASSERT_EQ(status, 0) << log;
  for (const char* pattern : {"'^model.language_model.*'", "'^lm_head.*'"}) {
    EXPECT_NE(log.find(std::string("unfrozen_parameters: ") + pattern + " matches no parameter of the base"),
              std::string::npos)
        << log;
  }
  expect_finite_losses(logged(out), 2, log);
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors")) << log;
}

}  // namespace
}  // namespace qtrain
