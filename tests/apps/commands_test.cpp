// The qtrain command line end to end: init-model writes a folder transformers loads; eval's JSON
// loss equals transformers' (+ peft, + bitsandbytes) loss on the same data; quantize writes a
// bitsandbytes folder that transformers loads with the same loss and that qtrain reads back
// without quantizing again; tokenize prints the ids HF `tokenizers` gives, one line each, and
// with --chat the ids of transformers' apply_chat_template(tokenize=True).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/io/bnb_checkpoint.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/lora/lora_linear.h"
#include "engine/model/init_model.h"
#include "ops/quant/kbit.h"
#include "tests/reference.h"
#include "tests/run_command.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;

test::CommandResult run(const std::string& cmd, bool with_stderr = false) {
  return test::run_command(cmd, with_stderr);
}

std::string last_line(const std::string& s) {
  auto end = s.find_last_not_of('\n');
  auto start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

class Commands : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qtrain_cmd_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const auto ref = engine::io::SafetensorsFile::open(test::model_fixture("llama") / "reference.safetensors");
    // The reference inputs as a pre-tokenized dataset, one row per sequence.
    std::ofstream data(dir_ / "data.jsonl");
    for (int64_t row = 0; row < 2; ++row) {
      nlohmann::json j;
      j["input_ids"] = std::vector<int64_t>(ref.tensor("ids")[row].data_ptr<int64_t>(),
                                            ref.tensor("ids")[row].data_ptr<int64_t>() + 24);
      j["labels"] = std::vector<int64_t>(ref.tensor("labels")[row].contiguous().data_ptr<int64_t>(),
                                         ref.tensor("labels")[row].contiguous().data_ptr<int64_t>() + 24);
      data << j.dump() << "\n";
    }
    engine::io::safetensors_save(dir_ / "inputs.safetensors",
                                 {{"ids", ref.tensor("ids")}, {"labels", ref.tensor("labels")}});
    reference_ = ref.tensor("nf4.loss").item<double>();
    reference_lora_ = ref.tensor("nf4.lora.loss").item<double>();
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  fs::path write_config(const fs::path& base) const {
    std::ofstream(dir_ / "qlora.yaml") << "base_model: " << base.string() << "\n"
                                       << "load_in_4bit: true\nbnb_4bit_quant_type: nf4\n"
                                       << "bnb_4bit_use_double_quant: true\nadapter: qlora\n"
                                       << "lora_target_linear: true\nmicro_batch_size: 2\nsequence_len: 64\n"
                                       << "device: cpu\ndatasets:\n  - path: data.jsonl\n";
    return dir_ / "qlora.yaml";
  }

  static std::string qtrain() { return QTRAIN_BINARY; }
  static std::string python() {
    const char* p = std::getenv("QTRAIN_PYTHON");
    return p ? p : "";
  }

  fs::path dir_;
  double reference_ = 0, reference_lora_ = 0;
};

// `qtrain keys` prints the run config table: every section as docs/CONFIG.md shows it, one key's
// row, and an error naming a key that is not one.
TEST_F(Commands, KeysPrintsTheRunConfigTable) {
  const auto all = run(qtrain() + " keys");
  EXPECT_EQ(all.status, 0);
  EXPECT_NE(all.out.find("### LoRA\n\n| Key | Type | Default | Source | Meaning |"), std::string::npos);
  EXPECT_NE(all.out.find("| `peft_use_dora` | bool | `false` | axolotl |"), std::string::npos);
  const auto one = run(qtrain() + " keys lora_r");
  EXPECT_EQ(one.status, 0);
  EXPECT_EQ(one.out,
            "| Key | Type | Default | Source | Meaning |\n|---|---|---|---|---|\n"
            "| `lora_r` | int in [1, 65536] | `8` | axolotl | The rank. |\n");
  const auto bad = run(qtrain() + " keys lora_rank", /*with_stderr=*/true);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("'lora_rank' is not a run config key"), std::string::npos) << bad.out;
}

TEST_F(Commands, EvalPrintsTheLossTransformersComputes) {
  const auto config = write_config(test::model_fixture("llama") / "base");
  const auto r = run(qtrain() + " eval " + config.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j.at("tokens").get<int64_t>(), 39);
  EXPECT_NEAR(j.at("loss").get<double>(), reference_, 2e-6);
  EXPECT_NEAR(j.at("perplexity").get<double>(), std::exp(reference_), 1e-4);
  const auto with_adapter =
      run(qtrain() + " eval " + config.string() + " --adapter " + (test::model_fixture("llama") / "adapter").string());
  ASSERT_EQ(with_adapter.status, 0);
  EXPECT_NEAR(nlohmann::json::parse(last_line(with_adapter.out)).at("loss").get<double>(), reference_lora_, 2e-6);
  // --set reaches the config: float32 weights give the float32 loss, which differs.
  const auto fp = run(qtrain() + " eval " + config.string() + " --set load_in_4bit=false --set adapter=lora");
  ASSERT_EQ(fp.status, 0);
  EXPECT_GT(std::abs(nlohmann::json::parse(last_line(fp.out)).at("loss").get<double>() - reference_), 1e-5);
}

TEST_F(Commands, EvalRejectsABadConfigWithAMessage) {
  std::ofstream(dir_ / "bad.yaml") << "base_model: " << (test::model_fixture("llama") / "base").string()
                                   << "\nlora_rank: 8\n";
  const auto r = run(qtrain() + " eval " + (dir_ / "bad.yaml").string(), /*with_stderr=*/true);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("bad.yaml:2:1: lora_rank: unknown key 'lora_rank'; did you mean 'lora_r'?"), std::string::npos)
      << r.out;
}

// qtrain preprocess with rl writes the pairs as TRL's tokenized rows, which read back as the same
// data: DPO's pairs as they are, KTO's unpaired (the chosen rows, then the rejected ones) with
// their labels.
TEST_F(Commands, PreprocessWritesAPreferenceRunsTokenizedRows) {
  std::ofstream(dir_ / "pairs.jsonl") << "{\"prompt_ids\": [1, 2], \"chosen_ids\": [3], \"rejected_ids\": [4, 5]}\n"
                                      << "{\"prompt_ids\": [6], \"chosen_ids\": [7], \"rejected_ids\": [8]}\n";
  for (const std::string rl : {"dpo", "kto"}) {
    SCOPED_TRACE(rl);
    const auto yaml = dir_ / (rl + ".yaml");
    std::ofstream(yaml) << "base_model: " << (test::model_fixture("llama") / "base").string()
                        << "\nlora_target_linear: true\nrl: " << rl
                        << "\nmicro_batch_size: 2\nsequence_len: 32\ndatasets:\n  - path: "
                        << (dir_ / "pairs.jsonl").string() << "\n";
    const auto out = dir_ / (rl + ".preprocessed.jsonl");
    const auto r = run(qtrain() + " preprocess " + yaml.string() + " --out " + out.string(), true);
    ASSERT_EQ(r.status, 0) << r.out;
    std::vector<nlohmann::json> rows;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    const std::vector<nlohmann::json> expected =
        rl == "dpo"
            ? std::vector<nlohmann::json>{{{"prompt_ids", {1, 2}}, {"chosen_ids", {3}}, {"rejected_ids", {4, 5}}},
                                          {{"prompt_ids", {6}}, {"chosen_ids", {7}}, {"rejected_ids", {8}}}}
            : std::vector<nlohmann::json>{{{"prompt_ids", {1, 2}}, {"completion_ids", {3}}, {"label", true}},
                                          {{"prompt_ids", {6}}, {"completion_ids", {7}}, {"label", true}},
                                          {{"prompt_ids", {1, 2}}, {"completion_ids", {4, 5}}, {"label", false}},
                                          {{"prompt_ids", {6}}, {"completion_ids", {8}}, {"label", false}}};
    EXPECT_EQ(rows, expected);
    EXPECT_NE(r.out.find(rl == "dpo" ? "2 preference pairs written" : "4 KTO rows written"), std::string::npos)
        << r.out;
  }
}

// An adapter trained on a base of hidden size 32, evaluated on the fixture's hidden-64 base: a
// clean error naming the adapter file, the tensor, both shapes and the fix, not a shape error in
// a matmul (or, as before, a loss computed with the wrong adapter).
TEST_F(Commands, EvalRefusesAnAdapterOfAnotherWidthNamingTheFileAndTheFix) {
  engine::lora::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.target_modules = {"q_proj"};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto adapter = dir_ / "hidden32";
  engine::io::save_peft_adapter(
      adapter, c, {{"model.layers.0.self_attn.q_proj", engine::lora::lora_init(32, 32, c, gen)}}, "org/hidden-32");
  const auto config = write_config(test::model_fixture("llama") / "base");
  const auto r = run(qtrain() + " eval " + config.string() + " --adapter " + adapter.string(), /*with_stderr=*/true);
  EXPECT_NE(r.status, 0) << r.out;
  for (const std::string& part : {(adapter / "adapter_model.safetensors").string(),
                                  std::string("'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' is [4, "
                                              "32] but the base model's model.layers.0.self_attn.q_proj needs [4, 64]"),
                                  std::string("use the base it was trained on, or an adapter trained on this one")}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("\"loss\""), std::string::npos) << r.out;
}

TEST_F(Commands, QuantizeWritesAFolderTransformersAndQtrainLoadUnchanged) {
  const auto config = write_config(test::model_fixture("llama") / "base");
  const auto out = dir_ / "nf4";
  ASSERT_EQ(run(qtrain() + " quantize " + config.string() + " --out " + out.string()).status, 0);
  // qtrain reads the bytes back as they are: equal to quantizing the float weight again.
  const auto q = engine::io::HfFolder::open(out);
  const auto base = engine::io::HfFolder::open(test::model_fixture("llama") / "base");
  const auto name = std::string("model.layers.1.mlp.down_proj.weight");
  const auto stored = engine::io::read_bnb_4bit(q, name);
  const auto fresh = ops::quantize_4bit(base.tensor(name).contiguous(), ops::QuantType::nf4, 64, true);
  EXPECT_TRUE(test::bitwise_equal(stored.packed, fresh.packed));
  EXPECT_TRUE(test::bitwise_equal(stored.nested->qabsmax, fresh.nested->qabsmax));
  // qtrain evaluates the quantized folder to the same loss.
  const auto r = run(qtrain() + " eval " + write_config(out).string());
  ASSERT_EQ(r.status, 0);
  EXPECT_NEAR(nlohmann::json::parse(last_line(r.out)).at("loss").get<double>(), reference_, 2e-6);
  // transformers + bitsandbytes load it as a pre-quantized model and agree.
  if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto hf = run(python() + " " + (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/hf_loss.py").string() + " " +
                      out.string() + " " + (dir_ / "inputs.safetensors").string());
  ASSERT_EQ(hf.status, 0) << hf.out;
  EXPECT_NEAR(std::stod(last_line(hf.out)), reference_, 2e-6);
}

TEST_F(Commands, MergeWritesAPlainFolderTransformersLoadsWithTheAdaptersLoss) {
  // The fixture adapter folded into the float32 base: transformers without peft must compute the
  // loss peft computes on base + adapter.
  std::ofstream(dir_ / "fp32.yaml") << "base_model: " << (test::model_fixture("llama") / "base").string()
                                    << "\nlora_target_linear: true\ndevice: cpu\n";
  const auto out = dir_ / "merged";
  ASSERT_EQ(run(qtrain() + " merge " + (dir_ / "fp32.yaml").string() + " --adapter " +
                (test::model_fixture("llama") / "adapter").string() + " --dtype fp32 --out " + out.string())
                .status,
            0);
  const auto merged = engine::io::HfFolder::open(out);
  EXPECT_FALSE(merged.config().contains("quantization_config"));
  EXPECT_EQ(merged.dtype("model.layers.0.self_attn.q_proj.weight"), at::kFloat);
  // The base's other files come along (here its generation_config.json; the tokenizer's files
  // too, RunVocabulary.NewTokensAndTheirRowsMatchTransformers).
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto ref = engine::io::SafetensorsFile::open(test::model_fixture("llama") / "reference.safetensors");
  const auto hf = run(python() + " " + (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/hf_loss.py").string() + " " +
                      out.string() + " " + (dir_ / "inputs.safetensors").string());
  ASSERT_EQ(hf.status, 0);
  // Merging rounds W + s*B*A once per weight; the loss moves by float32 rounding only.
  EXPECT_NEAR(std::stod(last_line(hf.out)), ref.tensor("fp32.lora.loss").item<double>(), 1e-5);
}

TEST_F(Commands, MergeWritesTiedEmbeddingsTrainedInFullApartSoTransformersKeepsBoth) {
  // Qwen3's tied embedding trained as two copies (peft's modules_to_save: embed_tokens and
  // lm_head): the merged folder holds both, lm_head.weight apart, with tie_word_embeddings false,
  // and transformers without peft computes the loss peft computes on base + adapter.
  const auto fixture = test::model_fixture("qwen3");
  std::ofstream(dir_ / "tied.yaml") << "base_model: " << (fixture / "base").string()
                                    << "\nlora_target_linear: true\ndevice: cpu\n";
  const auto out = dir_ / "merged_tied";
  const auto r = run(qtrain() + " merge " + (dir_ / "tied.yaml").string() + " --adapter " +
                     (fixture / "adapter_saved").string() + " --dtype fp32 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto merged = engine::io::HfFolder::open(out);
  EXPECT_FALSE(merged.config().at("tie_word_embeddings").get<bool>());
  EXPECT_TRUE(merged.contains("lm_head.weight"));
  EXPECT_FALSE(engine::io::HfFolder::open(fixture / "base").contains("lm_head.weight"));
  if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto ref = engine::io::SafetensorsFile::open(fixture / "reference.safetensors");
  const auto hf = run(python() + " " + (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/hf_loss.py").string() + " " +
                      out.string() + " " + (fixture / "reference.safetensors").string());
  ASSERT_EQ(hf.status, 0) << hf.out;
  EXPECT_NEAR(std::stod(last_line(hf.out)), ref.tensor("saved.loss").item<double>(), 1e-5);
}

TEST_F(Commands, MergeFoldsExpertAndRouterLoraIntoEachLayoutTransformersLoads) {
  // Expert LoRA (PEFT target_parameters) folded into the experts, written back in the layout the
  // base has: per-expert gate_proj/up_proj/down_proj (qwen3_moe), fused 3-D gate_up_proj and
  // down_proj (qwen3_moe_fused), Mixtral's w1/w3/w2; and peft's all-linear adapter, whose router
  // LoRA folds into mlp.gate.weight (block_sparse_moe.gate.weight in Mixtral's layout) or Gemma
  // 4's router.proj.weight. transformers without peft then computes the loss peft computes on
  // base + adapter.
  for (const std::string name : {"qwen3_moe", "qwen3_moe_fused", "mixtral", "gemma4_moe"}) {
    for (const auto& [adapter, prefix] : {std::pair{"adapter", "lora."}, std::pair{"adapter_all", "all."}}) {
      SCOPED_TRACE(name + " " + adapter);
      const auto fixture = test::moe_fixture(name);
      std::ofstream(dir_ / "moe.yaml") << "base_model: " << (fixture / "base").string()
                                       << "\nlora_target_linear: true\ndevice: cpu\n";
      const auto out = dir_ / ("merged_" + name + "_" + adapter);
      ASSERT_EQ(run(qtrain() + " merge " + (dir_ / "moe.yaml").string() + " --adapter " + (fixture / adapter).string() +
                    " --dtype fp32 --out " + out.string())
                    .status,
                0);
      const auto merged = engine::io::HfFolder::open(out);
      EXPECT_EQ(merged.tensor_names(), engine::io::HfFolder::open(fixture / "base").tensor_names());
      if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
      const auto ref = engine::io::SafetensorsFile::open(fixture / "reference.safetensors");
      const auto hf = run(python() + " " + (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/hf_loss.py").string() +
                          " " + out.string() + " " + (fixture / "reference.safetensors").string());
      ASSERT_EQ(hf.status, 0);
      // As for linear layers: W + s*B_e*A_e rounds once per expert weight in float32.
      EXPECT_NEAR(std::stod(last_line(hf.out)), ref.tensor(std::string(prefix) + "loss").item<double>(), 1e-5);
    }
  }
}

TEST_F(Commands, MergeOfAPreQuantizedBaseWritesPlainWeightsWithoutItsQuantState) {
  // An NF4 folder (qtrain quantize) merged with the fixture adapter: the output holds the float
  // base's tensor names only (no absmax, quant_map or quant_state left behind), and its loss is
  // the loss of the NF4 base with the adapter applied unmerged.
  const auto nf4 = dir_ / "nf4";
  ASSERT_EQ(run(qtrain() + " quantize " + write_config(test::model_fixture("llama") / "base").string() + " --out " +
                nf4.string())
                .status,
            0);
  const auto adapter = (test::model_fixture("llama") / "adapter").string();
  const auto config = write_config(nf4);
  const auto out = dir_ / "merged";
  ASSERT_EQ(
      run(qtrain() + " merge " + config.string() + " --adapter " + adapter + " --dtype fp32 --out " + out.string())
          .status,
      0);
  EXPECT_EQ(engine::io::HfFolder::open(out).tensor_names(),
            engine::io::HfFolder::open(test::model_fixture("llama") / "base").tensor_names());
  const auto unmerged = run(qtrain() + " eval " + config.string() + " --adapter " + adapter);
  ASSERT_EQ(unmerged.status, 0);
  std::ofstream(dir_ / "merged.yaml") << "base_model: " << out.string() << "\nlora_target_linear: true\ndevice: cpu\n"
                                      << "datasets:\n  - path: " << (dir_ / "data.jsonl").string() << "\n";
  const auto folded = run(qtrain() + " eval " + (dir_ / "merged.yaml").string());
  ASSERT_EQ(folded.status, 0);
  EXPECT_NEAR(nlohmann::json::parse(last_line(folded.out)).at("loss").get<double>(),
              nlohmann::json::parse(last_line(unmerged.out)).at("loss").get<double>(),
              1e-5);
}

TEST_F(Commands, TheDemoConfigTrainsAndItsLossFalls) {
  // configs/demo.yaml as scripts/demo.sh runs it, with the model and the output in a temporary
  // folder and fewer steps.
  const auto model = dir_ / "demo-llama";
  ASSERT_EQ(run(qtrain() + " init-model --arch llama --preset demo --seed 0 --out " + model.string()).status, 0);
  const auto out = dir_ / "demo-out";
  const auto r = run(qtrain() + " train " + (fs::path(QTRAIN_SOURCE_DIR) / "configs/demo.yaml").string() +
                     " --set base_model=" + model.string() + " --set output_dir=" + out.string() +
                     " --set max_steps=30 --set eval_steps=15 --set save_steps=15");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<double> losses, eval_losses;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j.at("loss").get<double>());
    if (j.contains("eval_loss")) eval_losses.push_back(j.at("eval_loss").get<double>());
  }
  ASSERT_EQ(losses.size(), 3u);  // logging_steps 10
  ASSERT_EQ(eval_losses.size(), 2u);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "the demo's loss must fall clearly";
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(out / "checkpoint-30" / "optimizer.safetensors"));
  EXPECT_NE(r.out.find("step 30/30 | epoch"), std::string::npos) << r.out;
}

// A tiny Qwen3-MoE (init-model's 8 experts, top-2, on every layer) trains from the demo config
// with NF4 experts, checkpointing and the demo's lora_target_linear, which on Qwen3-MoE is peft's
// all-linear: the attention, the routers and both expert parameters; its loss falls and the
// adapter it writes carries PEFT's expert and router keys, gate_up_proj at twice the rank.
TEST_F(Commands, AMoeModelTrainsWithExpertLoraAndItsLossFalls) {
  const auto model = dir_ / "demo-qwen3-moe";
  ASSERT_EQ(run(qtrain() + " init-model --arch qwen3_moe --preset demo --seed 0 --out " + model.string()).status, 0);
  const auto out = dir_ / "moe-out";
  const auto r = run(qtrain() + " train " + (fs::path(QTRAIN_SOURCE_DIR) / "configs/demo.yaml").string() +
                     " --set base_model=" + model.string() + " --set output_dir=" + out.string() +
                     " --set max_steps=12 --set logging_steps=4 --set warmup_steps=2 --set val_set_size=0" +
                     " --set eval_steps=0 --set save_steps=0 --set sequence_len=64 --set micro_batch_size=2" +
                     " --set gradient_accumulation_steps=1 --set lora_dropout=0");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<double> losses;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j.at("loss").get<double>());
  }
  ASSERT_EQ(losses.size(), 3u) << r.out;
  EXPECT_LT(losses.back(), losses.front() - 0.3) << r.out;
  const auto adapter = engine::io::SafetensorsFile::open(out / "adapter_model.safetensors");
  // lora_A of gate_up over 8 experts at r = 2 * 16: [32 * 8, hidden 256]; the router's at r 16.
  const auto a = adapter.tensor("base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight");
  EXPECT_EQ(a.sizes(), (at::IntArrayRef{256, 256}));
  EXPECT_TRUE(adapter.contains("base_model.model.model.layers.3.mlp.experts.lora_B.weight"));
  EXPECT_EQ(adapter.tensor("base_model.model.model.layers.3.mlp.gate.lora_B.weight").sizes(), (at::IntArrayRef{8, 16}));
  EXPECT_NE(r.out.find("r 32 for .*\\.gate_up_proj"), std::string::npos) << r.out;
}

// A chat_template dataset through a tokenizer.json end to end: a tiny random Llama whose
// vocabulary covers the Qwen3 stand-in tokenizer (with a ChatML template) trains, its loss falls,
// and `qtrain preprocess` writes the samples scripts/reference/chat_data_reference.py makes with
// transformers.
TEST_F(Commands, AChatDatasetTrainsThroughTheModelsTokenizer) {
  const char* fixtures = std::getenv("QTRAIN_FIXTURES");
  if (!fixtures) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
  const auto model = dir_ / "chat-llama";
  auto config = engine::model::preset_config(engine::model::Architecture::llama, "tiny");
  config.vocab_size = 4096;  // the stand-in tokenizer's 4026 ids
  engine::model::write_random_model(model, config, /*seed=*/3);
  const fs::path tokenizer = fs::path(fixtures) / "tokenizers" / "qwen3";
  fs::copy_file(tokenizer / "tokenizer.json", model / "tokenizer.json");
  auto tokenizer_config = nlohmann::ordered_json::parse(std::ifstream(tokenizer / "tokenizer_config.json"));
  tokenizer_config["chat_template"] =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  std::ofstream(model / "tokenizer_config.json") << tokenizer_config.dump();
  {
    std::ofstream data(dir_ / "chats.jsonl");
    for (int i = 0; i < 8; ++i) {
      data << nlohmann::json{{"messages",
                              {{{"role", "system"}, {"content", "You answer in one word."}},
                               {{"role", "user"}, {"content", "Name colour number " + std::to_string(i % 4)}},
                               {{"role", "assistant"},
                                {"content", std::vector<std::string>{"red", "green", "blue", "black"}[i % 4]}}}}}
                  .dump()
           << "\n";
    }
  }
  std::ofstream(dir_ / "chat.yaml") << "base_model: " << model.string() << "\n"
                                    << "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n"
                                    << "datasets:\n  - path: chats.jsonl\n    type: chat_template\n"
                                    << "sequence_len: 64\nmicro_batch_size: 4\nmax_steps: 12\nlearning_rate: 0.01\n"
                                    << "logging_steps: 1\ndevice: cpu\nseed: 1\noutput_dir: "
                                    << (dir_ / "chat-out").string() << "\n";
  const auto r = run(qtrain() + " train " + (dir_ / "chat.yaml").string(), /*with_stderr=*/true);
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<double> losses;
  std::ifstream metrics(dir_ / "chat-out" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j.at("loss").get<double>());
  }
  ASSERT_EQ(losses.size(), 12u) << r.out;
  for (const double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "the loss must fall on 8 repeated conversations";

  const auto out = dir_ / "chat.preprocessed.jsonl";
  const auto p = run(qtrain() + " preprocess " + (dir_ / "chat.yaml").string() + " --out " + out.string(), true);
  ASSERT_EQ(p.status, 0) << p.out;
  // qtrain eval reads the chat dataset through the tokenizer too: the same loss as on the
  // preprocessed samples, and stdout holds the result alone (the data lines go to stderr).
  const auto adapter = " --adapter " + (dir_ / "chat-out").string();
  const auto from_chat = run(qtrain() + " eval " + (dir_ / "chat.yaml").string() + adapter);
  const auto from_samples =
      run(qtrain() + " eval " + (dir_ / "chat.yaml").string() + adapter + " --data " + out.string());
  ASSERT_EQ(from_chat.status, 0) << from_chat.out;
  ASSERT_EQ(from_samples.status, 0) << from_samples.out;
  const auto chat_loss = nlohmann::json::parse(from_chat.out);
  EXPECT_EQ(chat_loss.at("tokens"), nlohmann::json::parse(from_samples.out).at("tokens"));
  EXPECT_DOUBLE_EQ(chat_loss.at("loss").get<double>(),
                   nlohmann::json::parse(from_samples.out).at("loss").get<double>());
  EXPECT_LT(chat_loss.at("loss").get<double>(), losses.front()) << "the adapter has learnt the conversations";
  if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto reference = dir_ / "chat.reference.jsonl";
  const auto ref =
      run(python() + " " + QTRAIN_SOURCE_DIR + "/scripts/reference/chat_data_reference.py --tokenizer " +
              model.string() + " --data " + (dir_ / "chats.jsonl").string() + " --out " + reference.string(),
          true);
  ASSERT_EQ(ref.status, 0) << ref.out;
  const auto lines = [](const fs::path& f) {
    std::vector<nlohmann::json> rows;
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  };
  const auto written = lines(out);
  ASSERT_EQ(written.size(), 8u);
  EXPECT_EQ(written, lines(reference));
}

// Every file of `dir` with its bytes, to show that a refused command changed nothing.
std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    files[e.path().lexically_relative(dir).string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

TEST_F(Commands, ModelWritersRefuseToWriteOverTheirInputOrAnExistingModel) {
  // A copy of the fixture, so that a broken check destroys nothing shared.
  const auto base = dir_ / "base";
  fs::copy(test::model_fixture("llama") / "base", base);
  const auto before = folder_bytes(base);
  const auto config = write_config(base);
  const auto adapter = (test::model_fixture("llama") / "adapter").string();
  struct Refusal {
    std::string command, message;
  };
  const std::vector<Refusal> refusals = {
      {" quantize " + config.string() + " --out " + base.string(),
       "is or lies inside the folder it reads (base_model: "},
      {" quantize " + config.string() + " --overwrite --out " + (base / ".." / "base" / "").string(),
       "is or lies inside the folder it reads"},
      {" merge " + config.string() + " --adapter " + adapter + " --out " + (base / "merged").string(),
       "is or lies inside the folder it reads (base_model: "},
      {" merge " + config.string() + " --adapter " + adapter + " --out " + dir_.string(),
       "contains the folder it reads"},
      {" init-model --arch llama --preset tiny --out " + base.string(),
       "already holds files (config.json, generation_config.json, model.safetensors); give --out a new folder, or pass "
       "--overwrite"},
  };
  for (const auto& [command, message] : refusals) {
    const auto r = run(qtrain() + command, /*with_stderr=*/true);
    EXPECT_NE(r.status, 0) << command;
    EXPECT_NE(r.out.find(message), std::string::npos) << command << "\n" << r.out;
  }
  EXPECT_EQ(folder_bytes(base), before);
  EXPECT_FALSE(fs::exists(base / "merged"));
  // A folder the command does not read may be replaced when the user says so.
  const auto out = dir_ / "tiny";
  ASSERT_EQ(run(qtrain() + " init-model --arch llama --preset tiny --seed 1 --out " + out.string()).status, 0);
  EXPECT_NE(run(qtrain() + " init-model --arch llama --preset tiny --seed 2 --out " + out.string()).status, 0);
  ASSERT_EQ(run(qtrain() + " init-model --arch llama --preset tiny --seed 2 --overwrite --out " + out.string()).status,
            0);
  EXPECT_NE(folder_bytes(out), folder_bytes(base));
}

// A checkpoint that cannot be written: the output folder is made read-only between two runs
// (for root, which writes anywhere, the run drops CAP_DAC_OVERRIDE). The resumed run stops with
// an error naming the checkpoint, the cause, the intact checkpoint before it and the fix; the
// checkpoints already written do not change and no partial folder is left; once the folder is
// writable again the run resumes to the adapter an uninterrupted run writes, byte for byte.
TEST_F(Commands, ACheckpointInAReadOnlyOutputFolderStopsTheRunAndKeepsTheOneBefore) {
  std::string restricted;  // what runs qtrain so that file permissions apply to it
  if (::geteuid() == 0) {
    restricted = "setpriv --bounding-set -dac_override,-dac_read_search ";
    if (run(restricted + "true").status != 0)
      GTEST_SKIP() << "running as root, and setpriv cannot drop CAP_DAC_OVERRIDE here: no folder is read-only to root";
  }
  const auto model = dir_ / "demo-llama";
  ASSERT_EQ(run(qtrain() + " init-model --arch llama --preset demo --seed 0 --out " + model.string()).status, 0);
  // A constant learning rate, so that two steps of a 2-step run are the first two of a 4-step one.
  const auto train = [&](const fs::path& out, int steps, bool resume, const std::string& prefix = "") {
    return run(prefix + qtrain() + " train " + (fs::path(QTRAIN_SOURCE_DIR) / "configs/demo.yaml").string() +
                   " --set base_model=" + model.string() + " --set output_dir=" + out.string() +
                   " --set max_steps=" + std::to_string(steps) +
                   " --set sequence_len=64 --set micro_batch_size=1 --set save_steps=1 --set eval_steps=0"
                   " --set warmup_steps=0 --set lr_scheduler=constant --set use_tensorboard=false"
                   " --set overwrite_output_dir=false --set resume_from_checkpoint=" +
                   (resume ? "true" : "false"),
               /*with_stderr=*/true);
  };
  const auto out = dir_ / "out";
  ASSERT_EQ(train(out, 2, false).status, 0);
  const auto checkpoints = [&] {
    auto files = folder_bytes(out / "checkpoint-1");
    for (auto& [name, bytes] : folder_bytes(out / "checkpoint-2")) files["2/" + name] = bytes;
    return files;
  };
  const auto before = checkpoints();
  ASSERT_FALSE(before.empty());
  const auto writable = fs::status(out).permissions();
  fs::permissions(out,
                  fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec);
  const auto refused = train(out, 4, true, restricted);
  fs::permissions(out, writable);
  EXPECT_NE(refused.status, 0) << refused.out;
  for (const std::string& part : {(out / "checkpoint-3").string() + " could not be written",
                                  std::string("Permission denied"),
                                  "the newest earlier checkpoint, " + (out / "checkpoint-2").string() + ", is intact",
                                  std::string("resume with resume_from_checkpoint: true")})
    EXPECT_NE(refused.out.find(part), std::string::npos) << part << "\n" << refused.out;
  EXPECT_EQ(checkpoints(), before);
  EXPECT_FALSE(fs::exists(out / "checkpoint-3.tmp"));
  EXPECT_FALSE(fs::exists(out / "checkpoint-3"));

  const auto resumed = train(out, 4, true, restricted);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resume: " + (out / "checkpoint-2").string() + " at step 2"), std::string::npos)
      << resumed.out;
  const auto uninterrupted = dir_ / "uninterrupted";
  ASSERT_EQ(train(uninterrupted, 4, false).status, 0);
  EXPECT_EQ(folder_bytes(out)["adapter_model.safetensors"], folder_bytes(uninterrupted)["adapter_model.safetensors"]);
}

TEST_F(Commands, InitModelWritesAFolderTransformersLoads) {
  const auto out = dir_ / "tiny-qwen3";
  ASSERT_EQ(run(qtrain() + " init-model --arch qwen3 --preset tiny --seed 5 --out " + out.string()).status, 0);
  const auto folder = engine::io::HfFolder::open(out);
  EXPECT_EQ(folder.config().at("model_type"), "qwen3");
  EXPECT_TRUE(folder.contains("model.layers.1.self_attn.q_norm.weight"));
  // The same seed writes the same weights.
  ASSERT_EQ(run(qtrain() + " init-model --arch qwen3 --preset tiny --seed 5 --out " + (dir_ / "again").string()).status,
            0);
  EXPECT_TRUE(at::equal(folder.tensor("model.embed_tokens.weight"),
                        engine::io::HfFolder::open(dir_ / "again").tensor("model.embed_tokens.weight")));
  // A negative seed is refused, not wrapped to 18446744073709551615.
  const auto negative =
      run(qtrain() + " init-model --arch qwen3 --preset tiny --seed -1 --out " + (dir_ / "negative").string(), true);
  EXPECT_NE(negative.status, 0);
  EXPECT_NE(negative.out.find("--seed"), std::string::npos) << negative.out;
  EXPECT_FALSE(fs::exists(dir_ / "negative"));
  if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  engine::io::safetensors_save(
      dir_ / "tiny_inputs.safetensors",
      {{"ids", at::arange(12, at::kLong).view({1, 12})}, {"labels", at::arange(12, at::kLong).view({1, 12})}});
  const auto hf = run(python() + " " + (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/hf_loss.py").string() + " " +
                      out.string() + " " + (dir_ / "tiny_inputs.safetensors").string());
  ASSERT_EQ(hf.status, 0);
  // A random model predicts close to uniformly over the 256-token vocabulary.
  EXPECT_NEAR(std::stod(last_line(hf.out)), std::log(256.0), 0.2);
}

// Tiny Gemma 2, 3 and 4 folders from init-model, and Gemma 4 with its expert block (tiny-moe):
// transformers loads them, and qtrain's eval loss in float32 is transformers' on the reference
// inputs. (Gemma 4's tiny layer 1 is full: wider heads, one kv head, no v_proj.)
TEST_F(Commands, InitModelWritesGemmaFoldersWithTransformersLoss) {
  for (const auto& [arch, preset] : {std::pair{"gemma2", "tiny"},
                                     std::pair{"gemma3", "tiny"},
                                     std::pair{"gemma4", "tiny"},
                                     std::pair{"gemma4", "tiny-moe"}}) {
    SCOPED_TRACE(std::string(arch) + " " + preset);
    const auto out = dir_ / (std::string(preset) + "-" + arch);
    ASSERT_EQ(
        run(qtrain() + " init-model --arch " + arch + " --preset " + preset + " --seed 3 --out " + out.string()).status,
        0);
    const auto folder = engine::io::HfFolder::open(out);
    EXPECT_EQ(folder.config().at("model_type"), std::string(arch) == "gemma2" ? "gemma2" : std::string(arch) + "_text");
    EXPECT_EQ(folder.contains("model.layers.1.self_attn.v_proj.weight"), std::string(arch) != "gemma4");
    EXPECT_TRUE(folder.contains("model.layers.1.pre_feedforward_layernorm.weight"));
    EXPECT_EQ(folder.contains("model.layers.1.experts.gate_up_proj"), std::string(preset) == "tiny-moe");
    std::ofstream(dir_ / "fp32.yaml")
        << "base_model: " << out.string()
        << "\nlora_target_linear: true\nsequence_len: 64\ndevice: cpu\ndatasets:\n  - path: data.jsonl\n";
    const auto r = run(qtrain() + " eval " + (dir_ / "fp32.yaml").string());
    ASSERT_EQ(r.status, 0) << r.out;
    const double loss = nlohmann::json::parse(last_line(r.out)).at("loss").get<double>();
    if (python().empty()) continue;
    const auto hf = run(python() + " " + (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/hf_loss.py").string() + " " +
                        out.string() + " " + (dir_ / "inputs.safetensors").string());
    ASSERT_EQ(hf.status, 0) << hf.out;
    // float32 on both sides: rounding only (the model parity tests' tolerance).
    EXPECT_NEAR(loss, std::stod(last_line(hf.out)), 2e-6);
  }
}

// configs/demo.yaml (QLoRA NF4, sample packing, checkpointing, dropout) on a Gemma 2 demo model:
// its soft-capped attention over packed segments, sliding layers and capped loss train, and the
// loss falls.
TEST_F(Commands, ADemoGemma2TrainsAndItsLossFalls) {
  const auto model = dir_ / "demo-gemma2";
  ASSERT_EQ(run(qtrain() + " init-model --arch gemma2 --preset demo --seed 0 --out " + model.string()).status, 0);
  const auto out = dir_ / "demo-out";
  const auto r = run(qtrain() + " train " + (fs::path(QTRAIN_SOURCE_DIR) / "configs/demo.yaml").string() +
                     " --set base_model=" + model.string() + " --set output_dir=" + out.string() +
                     " --set max_steps=30 --set eval_steps=30 --set save_steps=30");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<double> losses;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j.at("loss").get<double>());
  }
  ASSERT_EQ(losses.size(), 3u);  // logging_steps 10
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "the loss must fall clearly";
  EXPECT_TRUE(fs::exists(out / "adapter_model.safetensors"));
}

TEST_F(Commands, TokenizePrintsHfIdsPerLine) {
  // The llama3 stand-in and HF's ids for its single-line cases (scripts/reference/tokenizer_reference.py).
  const fs::path fixtures = std::getenv("QTRAIN_FIXTURES");
  std::ifstream f(fixtures / "tokenizers" / "cases.json");
  const auto ref = nlohmann::json::parse(f);
  std::string dir;
  std::vector<nlohmann::json> want, want_special;
  std::ofstream input(dir_ / "lines.txt");
  for (const auto& t : ref["tokenizers"]) {
    if (t["name"] != "llama3") continue;
    dir = t["dir"];
    for (const auto& c : t["cases"]) {
      const auto text = c["text"].get<std::string>();
      if (text.find_first_of("\r\n") != std::string::npos || want.size() == 40) continue;
      input << text << "\n";
      want.push_back(c["ids"]);
      want_special.push_back(c["ids_special"]);
    }
  }
  input.close();
  ASSERT_EQ(want.size(), 40u);
  for (const bool special : {false, true}) {
    const auto r = run(qtrain() + " tokenize --tokenizer " + dir + (special ? " --add-special-tokens" : "") + " < " +
                       (dir_ / "lines.txt").string());
    ASSERT_EQ(r.status, 0) << r.out;
    std::istringstream lines(r.out);
    std::string line;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::getline(lines, line)) << "missing line " << i + 1;
      EXPECT_EQ(nlohmann::json::parse(line), special ? want_special[i] : want[i]) << "line " << i + 1;
    }
    EXPECT_FALSE(std::getline(lines, line)) << "extra output: " << line;
  }
  // A folder without tokenizer.json: one line that says so, exit 1.
  const auto bad = run(qtrain() + " tokenize --tokenizer " + dir_.string() + " < /dev/null", true);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("tokenizer.json: not found"), std::string::npos) << bad.out;
}

// tokenize --chat against transformers' apply_chat_template(tokenize=True)
// (scripts/reference/chat_tokenize_reference.py) on the stand-in tokenizers: the named template
// of each family, both ways of add_generation_prompt, and the tokenizer's own template.
TEST_F(Commands, TokenizeChatPrintsApplyChatTemplateIds) {
  if (python().empty()) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const fs::path fixtures = fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers";
  const fs::path named = fs::path(QTRAIN_SOURCE_DIR) / "engine/text/chat_templates";
  std::ofstream(dir_ / "conversations.jsonl")
      << R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, café?"}, )"
      << R"({"role": "assistant", "content": "Hello! ☕ yes."}, {"role": "user", "content": "And 2+2?"}, )"
      << R"({"role": "assistant", "content": " 4 "}])"
      << "\n"
      << R"({"messages": [{"role": "user", "content": "Weather in Zürich?"}, {"role": "assistant", "content": )"
      << R"("Sunny."}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": )"
      << R"("Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})"
      << "\n"
      << R"([{"role": "user", "content": "Only a question"}])"
      << "\n";
  // The Qwen3 stand-in with a template of its own (ChatML's text).
  const fs::path own = dir_ / "qwen3-own-template";
  fs::create_directories(own);
  fs::copy_file(fixtures / "qwen3" / "tokenizer.json", own / "tokenizer.json");
  auto config = nlohmann::ordered_json::parse(std::ifstream(fixtures / "qwen3" / "tokenizer_config.json"));
  std::ifstream chatml(named / "chatml.jinja");
  config["chat_template"] = std::string(std::istreambuf_iterator<char>(chatml), std::istreambuf_iterator<char>());
  std::ofstream(own / "tokenizer_config.json") << config.dump();

  const std::vector<std::pair<fs::path, std::string>> runs = {
      {fixtures / "qwen3", "qwen3"},
      {fixtures / "qwen3", "qwen_25"},
      {fixtures / "llama3", "llama3"},
      {fixtures / "gemma3", "gemma3"},
      {fixtures / "mistral_v01", "mistral_v1"},
      {fixtures / "mistral_tekken", "mistral_v3_tekken"},
      {own, ""},
  };
  // One reference run for all: transformers loads once.
  std::string reference_runs;
  for (const auto& [tokenizer, name] : runs) {
    reference_runs += " --run " + tokenizer.string() + (name.empty() ? "" : "=" + (named / (name + ".jinja")).string());
  }
  const auto want_file = dir_ / "chat_ids.json";
  const auto ref = run(python() + " " + QTRAIN_SOURCE_DIR + "/scripts/reference/chat_tokenize_reference.py --data " +
                           (dir_ / "conversations.jsonl").string() + reference_runs + " --out " + want_file.string(),
                       true);
  ASSERT_EQ(ref.status, 0) << ref.out;
  const auto want = nlohmann::json::parse(std::ifstream(want_file));
  ASSERT_EQ(want.size(), 2 * runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const bool prompt : {false, true}) {
      const auto& [tokenizer, name] = runs[r];
      SCOPED_TRACE(tokenizer.string() + " " + name + (prompt ? " --add-generation-prompt" : ""));
      const auto& want_ids = want[2 * r + (prompt ? 1 : 0)];
      ASSERT_EQ(want_ids.at("add_generation_prompt"), prompt);
      const std::string flags =
          (name.empty() ? "" : " --chat-template " + name) + (prompt ? " --add-generation-prompt" : "");
      const auto got = run(qtrain() + " tokenize --chat --tokenizer " + tokenizer.string() + flags + " < " +
                               (dir_ / "conversations.jsonl").string(),
                           true);
      ASSERT_EQ(got.status, 0) << got.out;
      std::istringstream got_in(got.out);
      std::string line;
      for (size_t i = 0; i < want_ids.at("ids").size(); ++i) {
        ASSERT_TRUE(std::getline(got_in, line)) << "missing line " << i + 1;
        EXPECT_EQ(nlohmann::json::parse(line), want_ids["ids"][i]) << "line " << i + 1;
      }
      EXPECT_EQ(want_ids["ids"].size(), 3u);
      EXPECT_FALSE(std::getline(got_in, line)) << "extra output: " << line;
    }
  }
  // A template that refuses a conversation: the line and the template's message.
  const auto refused = run(qtrain() + " tokenize --chat --chat-template gemma --tokenizer " +
                               (fixtures / "gemma3").string() + " < " + (dir_ / "conversations.jsonl").string(),
                           true);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.out.find("line 1 of the input"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("System role not supported"), std::string::npos) << refused.out;
  const auto unknown = run(qtrain() + " tokenize --chat --chat-template chatml3 --tokenizer " +
                               (fixtures / "qwen3").string() + " < /dev/null",
                           true);
  EXPECT_NE(unknown.status, 0);
  EXPECT_NE(unknown.out.find("'chatml3' is neither a named template (chatml, gemma"), std::string::npos) << unknown.out;
}

TEST_F(Commands, PlanPrintsTheMemoryTableFromConfigJsonAlone) {
  // Llama-3-8B shapes, and no weight file: plan must not open any.
  const auto model = dir_ / "llama3-8b";
  fs::create_directories(model);
  std::ofstream(model / "config.json")
      << engine::model::preset_config(engine::model::Architecture::llama, "llama3-8b").to_json().dump(2);
  std::ofstream(dir_ / "plan.yaml") << "base_model: llama3-8b\nload_in_4bit: true\nlora_r: 16\n"
                                    << "lora_target_linear: true\nsequence_len: 2048\nbf16: auto\n"
                                    << "gradient_accumulation_steps: 4\noffload_layers: auto\n";
  const std::string plan = qtrain() + " plan " + (dir_ / "plan.yaml").string();

  const auto roomy = run(plan + " --gpu-memory 24GiB", /*with_stderr=*/true);
  ASSERT_EQ(roomy.status, 0) << roomy.out;
  for (const char* part : {"decoder layer weights, resident",
                           "3.35 GiB  32 of 32 layers",
                           "embeddings, output head, norms, biases",
                           "LoRA weights, gradients, AdamW moments",
                           "640.0 MiB",
                           "activations kept for backward",
                           "largest transient",
                           "CUDA context",
                           "budget                                      24.00 GiB  fits",
                           "plan: every layer resident, nothing offloaded (offload_layers: auto)",
                           "PCIe traffic per step: 0 B",
                           "longest sequence_len that fits 24.00 GiB (micro_batch_size 1, offload_layers auto):\n"
                           "  activation offloading off, tiled MLP off: ",
                           "  (as configured)\n  activation offloading off, tiled MLP on:  ",
                           "\n  activation offloading on,  tiled MLP on:  "}) {
    EXPECT_NE(roomy.out.find(part), std::string::npos) << part << "\n" << roomy.out;
  }

  // Preference tuning: a micro-batch of pairs is twice the rows, each row's length is the limit.
  const auto dpo = run(plan + " --gpu-memory 24GiB --set rl=dpo", true);
  ASSERT_EQ(dpo.status, 0) << dpo.out;
  EXPECT_NE(dpo.out.find("longest sequence_len that fits 24.00 GiB (micro_batch_size 1 (rl: dpo: 2 rows, each prompt + "
                         "completion), offload_layers auto):"),
            std::string::npos)
      << dpo.out;

  // 8 GiB: some layers stream from host RAM, copied twice in each of 4 micro-batches.
  const auto tight = run(plan + " --gpu-memory 8GiB --h2d-bandwidth 12.5GB/s", true);
  ASSERT_EQ(tight.status, 0) << tight.out;
  EXPECT_NE(tight.out.find("layers in pinned host RAM"), std::string::npos) << tight.out;
  EXPECT_NE(tight.out.find("2 device slots, prefetch depth 1 (offload_layers: auto)"), std::string::npos) << tight.out;
  EXPECT_NE(tight.out.find("x 2 copies x 4 micro-batches)"), std::string::npos) << tight.out;
  EXPECT_NE(tight.out.find("at 12.5 GB/s"), std::string::npos) << tight.out;

  // 3 GiB: even every layer offloaded does not fit; the table, by how much, what to change, exit 1.
  const auto small = run(plan + " --gpu-memory 3GiB", true);
  ASSERT_TRUE(WIFEXITED(small.status));
  EXPECT_EQ(WEXITSTATUS(small.status), 1) << small.out;
  EXPECT_NE(small.out.find("decoder layer weights, resident"), std::string::npos) << small.out;
  EXPECT_NE(small.out.find("more than the budget of 3.00 GiB, even with every layer offloaded"), std::string::npos)
      << small.out;
  EXPECT_NE(small.out.find("nothing in the config makes it fit"), std::string::npos) << small.out;

  // The budget from the config; a fixed offload_layers that does not fit points to auto, a
  // larger micro-batch to smaller ones with the same samples per step.
  const auto fixed = run(plan + " --set gpu_memory_limit=8GiB --set offload_layers=0", true);
  EXPECT_EQ(WEXITSTATUS(fixed.status), 1) << fixed.out;
  EXPECT_NE(fixed.out.find("budget: 8.00 GiB (gpu_memory_limit: 8GiB)"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("to make it fit, change one of:\n  - offload_layers: auto: "), std::string::npos)
      << fixed.out;
  const auto batch = run(plan + " --set gpu_memory_limit=8GiB --set micro_batch_size=4", true);
  EXPECT_EQ(WEXITSTATUS(batch.status), 1) << batch.out;
  EXPECT_NE(batch.out.find("  - micro_batch_size: 2 with gradient_accumulation_steps: 8 (the same samples per step)"),
            std::string::npos)
      << batch.out;

  const auto too_many = run(plan + " --gpu-memory 24GiB --set offload_layers=40", true);
  EXPECT_EQ(WEXITSTATUS(too_many.status), 1);
  EXPECT_NE(too_many.out.find("offload_layers is 40 but the model has 32 decoder layers"), std::string::npos)
      << too_many.out;
  const auto bad = run(plan + " --gpu-memory lots", true);
  EXPECT_NE(bad.out.find("--gpu-memory 'lots': expected a size such as 24GiB"), std::string::npos) << bad.out;
  // Gemma-2-2B's shapes: head_dim 256 (8 heads over hidden 2304), four norms per layer and a
  // tied 256000-token embedding: (256000 x 2304 + 2304 + 26 x 4 x 2304) x 2 B in bf16 plus the
  // float32 rope frequencies (128 x 4 B) = 1.10 GiB.
  const auto gemma = dir_ / "gemma2-2b";
  fs::create_directories(gemma);
  std::ofstream(gemma / "config.json")
      << engine::model::preset_config(engine::model::Architecture::gemma2, "gemma2-2b").to_json().dump(2);
  const auto g = run(plan + " --gpu-memory 24GiB --set base_model=" + gemma.string(), true);
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_NE(g.out.find("26 of 26 layers"), std::string::npos) << g.out;
  const auto fixed_line = g.out.find("embeddings, output head, norms, biases");
  ASSERT_NE(fixed_line, std::string::npos) << g.out;
  EXPECT_NE(g.out.substr(fixed_line, g.out.find('\n', fixed_line) - fixed_line).find("1.10 GiB"), std::string::npos)
      << g.out;
  if (!at::hasCUDA()) {
    const auto none = run(plan, true);
    EXPECT_NE(none.out.find("no GPU here to plan for: give the budget with --gpu-memory 24GiB"), std::string::npos)
        << none.out;
  }
}

// Gemma-4-26B-A4B with its 128 experts a layer on a 24 GiB card, at 2048 tokens, micro-batch 1,
// every layer checkpointed, LoRA r 16 on attention, the dense MLP and the experts: its layers
// are 11.77 GiB in NF4 with double quantization (the reference's 12.65 GB) and the LoRA state
// 7.37 GiB, so it fits with some layers streamed from host RAM; in INT8 (twice the bytes) it
// fits with most of them streamed.
TEST_F(Commands, PlanFitsGemma4MoeOn24GiBInNf4AndInInt8WithOffload) {
  const auto model = dir_ / "gemma4-26b-a4b";
  fs::create_directories(model);
  std::ofstream(model / "config.json")
      << engine::model::preset_config(engine::model::Architecture::gemma4, "gemma4-26b-a4b").to_json().dump(2);
  std::ofstream(dir_ / "gemma4.yaml")
      << "base_model: gemma4-26b-a4b\nload_in_4bit: true\nbnb_4bit_use_double_quant: true\nadapter: qlora\n"
      << "lora_r: 16\nlora_dropout: 0\nlora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
      << "down_proj]\nlora_target_parameters: [experts.gate_up_proj, experts.down_proj]\nsequence_len: 2048\n"
      << "micro_batch_size: 1\ngradient_checkpointing: true\nbf16: auto\noffload_layers: auto\n";
  const std::string plan = qtrain() + " plan " + (dir_ / "gemma4.yaml").string() + " --gpu-memory 24GiB";
  const auto nf4 = run(plan, true);
  ASSERT_EQ(nf4.status, 0) << nf4.out;
  // With the loss chunk sized in bytes (408 tokens of the 262,144-token vocabulary, Note [Loss
  // chunk size]) the NF4 base fits without offloading a layer.
  for (const char* part : {"gemma4_text, 30 layers",
                           "LoRA weights, gradients, AdamW moments       7.37 GiB",
                           "fits",
                           "plan: every layer resident, nothing offloaded"}) {
    EXPECT_NE(nf4.out.find(part), std::string::npos) << part << "\n" << nf4.out;
  }
  const auto int8 = run(plan + " --set load_in_4bit=false --set load_in_8bit=true --set adapter=lora", true);
  ASSERT_EQ(int8.status, 0) << int8.out;
  EXPECT_NE(int8.out.find("layers in pinned host RAM"), std::string::npos) << int8.out;
  // The experts kept in bf16 (quantize_moe_experts: false): a full layer is 1557 MB (1.45 GiB),
  // 1522.5 MB of experts and the rest in NF4, so a device slot holds that much.
  const auto bf16_experts = run(plan + " --set quantize_moe_experts=false", true);
  EXPECT_NE(bf16_experts.out.find("device slots for offloaded layers            2.90 GiB  2 x 1.45 GiB"),
            std::string::npos)
      << bf16_experts.out;
}

// Llama-2-70B's public config.json shape (fsdp_qlora's two-card anchor), QLoRA NF4 with double
// quantization, r=16 on every linear layer, sequence 2048, micro-batch 1, checkpointing, 24 GiB a
// rank. Per rank: the whole base is 32.89 GiB of layers; sharded over 2 ranks 16.44 GiB, and with
// replicated LoRA/AdamW (3.09 GiB), checkpointed activations (2.59 GiB) and a layer's recompute
// (2.29 GiB) the step needs 28.09 GiB, so shards of about a quarter of the layers go to pinned host
// RAM; over 3 ranks it fits with nothing offloaded.
TEST_F(Commands, PlanFitsLlama2_70bOnTwo24GiBRanksWithAShardedBase) {
  const auto model = dir_ / "llama2-70b";
  fs::create_directories(model);
  std::ofstream(model / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": false, "torch_dtype": "float16"})";
  std::ofstream(dir_ / "70b.yaml") << "base_model: llama2-70b\nload_in_4bit: true\nbnb_4bit_use_double_quant: true\n"
                                   << "adapter: qlora\nlora_r: 16\nlora_alpha: 16\nlora_dropout: 0\n"
                                   << "lora_target_linear: true\nsequence_len: 2048\nmicro_batch_size: 1\n"
                                   << "gradient_checkpointing: true\nbf16: auto\nshard_base: true\n";
  const std::string plan = qtrain() + " plan " + (dir_ / "70b.yaml").string() + " --gpu-memory 24GiB";
  const auto two = run(plan + " --world-size 2 --set offload_layers=auto", true);
  ASSERT_EQ(two.status, 0) << two.out;
  for (const char* part : {"GPU memory per step, per rank (2 ranks)",
                           "on each of 2 ranks, base sharded over them",
                           "1/2 of each (shards)",
                           "base sharded over 2 ranks",
                           "layers in pinned host RAM",
                           "fits"}) {
    EXPECT_NE(two.out.find(part), std::string::npos) << part << "\n" << two.out;
  }
  // Without offload two ranks do not fit, and the advice says what does.
  const auto resident = run(plan + " --world-size 2", true);
  EXPECT_NE(resident.status, 0) << resident.out;
  EXPECT_NE(resident.out.find("to make it fit, change one of:\n  - offload_layers: auto"), std::string::npos)
      << resident.out;
  EXPECT_TRUE(run(plan + " --world-size 3", true).status == 0) << "three ranks fit with nothing offloaded";
  // Two ranks with the whole base each: the advice names shard_base.
  const auto whole = run(plan + " --world-size 2 --set shard_base=false", true);
  EXPECT_NE(whole.status, 0) << whole.out;
  EXPECT_NE(whole.out.find("  - shard_base: true (each of the 2 ranks keeps 1/2 of the base)"), std::string::npos)
      << whole.out;
}

}  // namespace
}  // namespace qtrain
