// New tokens (axolotl's `tokens:` and new special_tokens) against transformers: the tokenizer
// gives the ids transformers' does after add_special_tokens / add_tokens, the grown embeddings
// and head are bitwise those of torch.manual_seed(seed); resize_token_embeddings(...) on an
// untied Llama and a tied Gemma 3, with axolotl's default initialisation and mean_resizing; and
// an adapter trained with them evaluates in peft as in qtrain
// (scripts/reference/new_tokens_reference.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/config/run_config.h"
#include "engine/data/model_tokenizer.h"
#include "engine/data/run_tokenizer_files.h"
#include "engine/io/companion_files.h"
#include "engine/io/hf_folder.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/model/causal_lm.h"
#include "engine/model/init_model.h"
#include "engine/model/lora_attach.h"
#include "engine/model/saved_modules.h"
#include "engine/schedule/layer_scheduler.h"
#include "engine/text/tokenizer.h"
#include "engine/train/gguf_export.h"
#include "engine/train/model_folders.h"
#include "engine/train/run_plan.h"
#include "engine/train/run_vocabulary.h"
#include "engine/train/trainer.h"
#include "engine/train/training_data.h"
#include "tests/expect_error.h"
#include "tests/reference.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTexts = {"hello<|tool|>world", "a <think>b</think> <|new_eos|> end", "<|pad|><|tool|>"};

class RunVocabulary : public testing::Test {
 protected:
  void SetUp() override {
    const char* fixtures = std::getenv("QTRAIN_FIXTURES");
    if (fixtures == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
    fixtures_ = fixtures;
    dir_ = test::fresh_test_dir(/*create=*/true);
  }
  void TearDown() override {
    if (!dir_.empty()) io::remove_tree(dir_);
  }

  // A tiny random model of `arch` whose embeddings have one row per token of the `tokenizer`
  // stand-in, with that tokenizer's files.
  fs::path model(model::Architecture arch, const std::string& tokenizer) const {
    const auto folder = dir_ / ("model-" + model::architecture_name(arch));
    if (fs::exists(folder)) return folder;
    const auto files = fixtures_ / "tokenizers" / tokenizer;
    auto config = model::preset_config(arch, "tiny");
    config.vocab_size = static_cast<int64_t>(text::Tokenizer::load(files).vocab_size());
    model::write_random_model(folder, config, /*seed=*/5);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(files / f, folder / f);
    return folder;
  }

  config::RunConfig config(const fs::path& base, const std::vector<std::string>& sets) const {
    const auto file = dir_ / "run.yaml";
    std::ofstream(file) << "base_model: " << base.string() << "\n"
                        << "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                        << "tokens: [\"<|tool|>\", \"<think>\", \"</think>\", \"hello\"]\n"
                        << "special_tokens: {eos_token: \"<|new_eos|>\", pad_token: \"<|pad|>\"}\n"
                        << "datasets:\n  - path: " << (dir_ / "data.jsonl").string() << "\n    type: completion\n"
                        << "sequence_len: 32\nmicro_batch_size: 4\nmax_steps: 3\nlearning_rate: 0.01\n"
                        << "device: cpu\nseed: 3\noutput_dir: " << (dir_ / "out").string() << "\n";
    return config::load_run_config(file, sets);
  }

  // The script's result.json, with its embeddings.safetensors as "embed" and "head" beside.
  struct Reference {
    nlohmann::json result;
    at::Tensor embed, head;
  };
  Reference python(const fs::path& base,
                   const config::RunConfig& c,
                   const nlohmann::json& more = nlohmann::json::object()) const {
    nlohmann::json settings = {
        {"tokens", c.tokens},
        {"special_tokens", {{"eos_token", c.special_tokens.eos_token}, {"pad_token", c.special_tokens.pad_token}}},
        {"seed", c.seed},
        {"mean_resizing", c.mean_resizing_embeddings},
        {"to_32x", c.resize_token_embeddings_to_32x},
        {"texts", kTexts}};
    settings.update(more);
    const auto out = dir_ / "reference";
    io::remove_tree(out);
    std::ofstream(dir_ / "settings.json") << settings.dump();
    const std::string cmd = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                            (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/new_tokens_reference.py").string() + " " +
                            base.string() + " " + (dir_ / "settings.json").string() + " " + out.string() + " > " +
                            (dir_ / "log").string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Reference r;
    r.result = nlohmann::json::parse(std::ifstream(out / "result.json"));
    auto tensors = io::safetensors_load(out / "embeddings.safetensors");
    r.embed = tensors.at("embed");
    r.head = tensors.at("head");
    return r;
  }

  fs::path fixtures_, dir_;
};

TEST_F(RunVocabulary, NewTokensAndTheirRowsMatchTransformers) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  struct Case {
    model::Architecture arch;
    const char* tokenizer;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {model::Architecture::llama, "llama3", {}},
      {model::Architecture::llama, "llama3", {"mean_resizing_embeddings=true", "resize_token_embeddings_to_32x=true"}},
      {model::Architecture::gemma3, "gemma3", {}},
      {model::Architecture::gemma3, "gemma3", {"mean_resizing_embeddings=true"}},
  };
  for (const auto& k : cases) {
    const auto base = model(k.arch, k.tokenizer);
    const auto c = config(base, k.sets);
    const std::string what = base.filename().string() + " " + (k.sets.empty() ? "" : k.sets[0]);
    std::vector<data::NewToken> added;
    const auto tokenizer = run_tokenizer(c, read_model_config(base).vocab_size, &added);
    auto lm = model::CausalLM::load(io::HfFolder::open(base), model::LoadOptions{});
    const int64_t before = lm.config().vocab_size;
    const auto line = fit_embeddings(lm, c, tokenizer.get(), added);
    // The run's tokenizer as merge writes it into its folder, loaded by transformers as it is.
    const auto saved = dir_ / ("saved-" + base.filename().string());
    io::remove_tree(saved);
    fs::create_directories(saved);
    EXPECT_EQ(io::copy_companion_files(base, saved),
              (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
    EXPECT_TRUE(data::write_run_tokens(saved, c, *tokenizer));
    const auto theirs = python(base, c, {{"saved_tokenizer", saved.string()}});

    // The tokenizer: the same size and ids; "<|pad|>" and "<|new_eos|>" are special, the
    // listed tokens are not, and all are cut out of the text.
    EXPECT_EQ(tokenizer->vocab_size(), theirs.result.at("len").get<int64_t>()) << what;
    for (size_t i = 0; i < kTexts.size(); ++i) {
      EXPECT_EQ(tokenizer->tokenize(kTexts[i], false).ids, theirs.result.at("ids")[i].get<std::vector<int64_t>>())
          << what << ": " << kTexts[i];
    }
    // The written tokenizer: transformers and qtrain read the run's tokens and roles back from it.
    const auto& back = theirs.result.at("saved");
    const auto reread = data::model_tokenizer(saved, lm.config().vocab_size);
    EXPECT_EQ(back.at("len").get<int64_t>(), tokenizer->vocab_size()) << what;
    EXPECT_EQ(reread->vocab_size(), tokenizer->vocab_size()) << what;
    for (size_t i = 0; i < kTexts.size(); ++i) {
      const auto ids = tokenizer->tokenize(kTexts[i], false).ids;
      EXPECT_EQ(back.at("ids")[i].get<std::vector<int64_t>>(), ids) << what << ": " << kTexts[i];
      EXPECT_EQ(reread->tokenize(kTexts[i], false).ids, ids) << what << ": " << kTexts[i];
    }
    EXPECT_EQ(back.at("eos_token"), "<|new_eos|>") << what;
    EXPECT_EQ(back.at("pad_token"), "<|pad|>") << what;
    EXPECT_EQ(reread->eos_token(), "<|new_eos|>") << what;
    EXPECT_EQ(reread->pad_id(), tokenizer->pad_id()) << what;
    ASSERT_EQ(added.size(), 6u) << what << ": " << line;
    EXPECT_EQ(added[0].key, "special_tokens.eos_token");
    EXPECT_EQ(added[1].key, "special_tokens.pad_token");
    EXPECT_EQ(added[2].id, before + 2) << "tokens: come after special_tokens";
    EXPECT_NE(line.find("embeddings grown from " + std::to_string(before)), std::string::npos) << line;

    // The rows: bitwise, the old ones kept and the new ones drawn as transformers draws them.
    EXPECT_EQ(lm.config().vocab_size, theirs.result.at("rows").get<int64_t>()) << what;
    // The memory plan counts those rows before anything is loaded.
    EXPECT_EQ(run_model_config(c).vocab_size, lm.config().vocab_size) << what;
    EXPECT_TRUE(test::bitwise_equal(lm.embed_tokens(), theirs.embed)) << what;
    EXPECT_TRUE(test::bitwise_equal(lm.lm_head(), theirs.head)) << what;
    EXPECT_EQ(lm.lm_head().is_same(lm.embed_tokens()), k.arch == model::Architecture::gemma3) << what;
    // The draw is random: the new rows are not zero nor all one row.
    const auto fresh = lm.embed_tokens().narrow(0, before, 2);
    EXPECT_GT(fresh.abs().sum().item<double>(), 0) << what;
    EXPECT_FALSE(at::equal(fresh[0], fresh[1])) << what;
    io::remove_tree(base);  // the next case writes it again, untouched
  }
}

TEST_F(RunVocabulary, RowsFollowAxolotlsRules) {
  config::RunConfig c;
  EXPECT_EQ(embedding_rows(c, 100, 103), 103);
  EXPECT_EQ(embedding_rows(c, 100, 90), 100) << "spare rows are kept";
  c.shrink_embeddings = true;
  EXPECT_EQ(embedding_rows(c, 100, 90), 90);
  c.resize_token_embeddings_to_32x = true;
  EXPECT_EQ(embedding_rows(c, 100, 103), 128);
  EXPECT_EQ(embedding_rows(c, 128, 103), 128);
  EXPECT_EQ(embedding_rows(c, 200, 103), 128);
}

TEST_F(RunVocabulary, ANewTokenNeedsTheEmbeddingsTrainedButANewPadDoesNot) {
  const auto base = model(model::Architecture::llama, "llama3");
  auto lm = model::CausalLM::load(io::HfFolder::open(base), model::LoadOptions{});
  const std::vector<data::NewToken> pad = {{"<|pad|>", 4011, "special_tokens.pad_token"}};
  check_new_tokens_trained(lm, pad);
  const std::vector<data::NewToken> tool = {{"<|tool|>", 4011, "tokens"}};
  for (const char* fragment :
       {"tokens: '<|tool|>' is a new token (id 4011)", "lora_modules_to_save: [embed_tokens, lm_head]", "neither"}) {
    test::expect_error([&] { check_new_tokens_trained(lm, tool); }, fragment);
  }
  lora::LoraConfig saved;
  saved.modules_to_save = {"embed_tokens"};
  model::attach_new_saved_modules(lm, saved);
  test::expect_error([&] { check_new_tokens_trained(lm, tool); }, "trains model.embed_tokens but not lm_head");
  saved.modules_to_save = {"lm_head"};
  model::attach_new_saved_modules(lm, saved);
  check_new_tokens_trained(lm, tool);
}

// Trained with the new tokens (embeddings and head in full beside LoRA), the adapter loads in
// peft on the model transformers resizes the same way, and gives qtrain's loss: the saved rows
// are the trained ones, and the rows of the tokens the data never shows are the drawn ones.
TEST_F(RunVocabulary, AnAdapterTrainedWithNewTokensGivesPeftsLoss) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto base = model(model::Architecture::llama, "llama3");
  {
    std::ofstream data(dir_ / "data.jsonl");
    for (int i = 0; i < 8; ++i)
      data << nlohmann::json{{"text", kTexts[i % 2] + " " + std::to_string(i)}}.dump() << "\n";
  }
  const auto c = config(base, {"lora_modules_to_save=[embed_tokens, lm_head]"});
  const auto result = train(c);
  ASSERT_EQ(result.steps, 3);

  std::vector<data::NewToken> added;
  const auto tokenizer = run_tokenizer(c, read_model_config(base).vocab_size, &added);
  auto lm = model::CausalLM::load(io::HfFolder::open(base), model::LoadOptions{});
  fit_embeddings(lm, c, tokenizer.get(), added);
  const auto drawn = lm.embed_tokens().clone();
  const auto adapter = io::load_peft_adapter(c.output_dir);
  model::attach_lora(lm, adapter, c.output_dir.string());
  const auto& embed = lm.trained_embed_tokens();
  ASSERT_TRUE(embed.defined());
  EXPECT_EQ(embed.size(0), drawn.size(0));
  const int64_t tool = *tokenizer->id_of("<|tool|>"), pad = *tokenizer->id_of("<|pad|>");
  EXPECT_FALSE(at::equal(embed[tool], drawn[tool])) << "a token of the data trained";
  EXPECT_TRUE(at::equal(embed[pad], drawn[pad])) << "the padding row never trains";

  std::vector<int64_t> ids;
  for (const auto& text : kTexts) {
    const auto t = tokenizer->tokenize(text, false).ids;
    ids.insert(ids.end(), t.begin(), t.end());
  }
  const auto ids_t = at::tensor(ids, at::kLong).unsqueeze(0);
  io::safetensors_save(dir_ / "inputs.safetensors", {{"ids", ids_t}, {"labels", ids_t}});
  schedule::LayerScheduler scheduler(lm);
  const auto plan = scheduler.prepare_eval();
  const auto r = scheduler.eval_loss(plan, ids_t, ids_t);
  const double ours = r.loss_sum.item<double>() / static_cast<double>(r.tokens);
  // The tokenizer that made the new ids lies beside the adapter, as axolotl saves it, and
  // transformers reads them from it.
  const auto theirs = python(base,
                             c,
                             {{"adapter", c.output_dir.string()},
                              {"inputs", (dir_ / "inputs.safetensors").string()},
                              {"saved_tokenizer", c.output_dir.string()}});
  // float32 on both sides, the same weights: summation order only.
  EXPECT_NEAR(ours, theirs.result.at("loss").get<double>(), 1e-5 * ours);
  for (size_t i = 0; i < kTexts.size(); ++i) {
    EXPECT_EQ(theirs.result.at("saved").at("ids")[i].get<std::vector<int64_t>>(),
              tokenizer->tokenize(kTexts[i], false).ids)
        << kTexts[i];
  }
}

// Note [Exported new tokens]: export-gguf of a run with new tokens (and the rows rounded up to 32,
// so the file pads the vocabulary too) holds the keys and the tensor bytes of export-gguf of the
// folder `qtrain merge` writes for it (scripts/reference/gguf_equal.py) (checked against llama.cpp's converter and
// transformers by ExportGguf.*), and its tokens include the run's: on a Llama with a byte-level BPE tokenizer, and on a
// Gemma 3 with a SentencePiece tokenizer.model (scripts/reference/gguf_spm_fixture.py), whose new tokens reach the file
// through tokenizer_config.json's added_tokens_decoder.
TEST_F(RunVocabulary, ExportOfANewTokensRunIsTheExportOfItsMergedFolder) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  {
    std::ofstream data(dir_ / "data.jsonl");
    for (int i = 0; i < 8; ++i)
      data << nlohmann::json{{"text", kTexts[i % 2] + " " + std::to_string(i)}}.dump() << "\n";
  }
  const auto spm = dir_ / "spm" / "model-gemma3";
  const std::string made = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                           (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_spm_fixture.py").string() + " " +
                           (fixtures_ / "tokenizers" / "gemma3").string() + " " + spm.string() + " > " +
                           (dir_ / "spm.log").string() + " 2>&1";
  ASSERT_EQ(std::system(made.c_str()), 0) << made;
  const auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const auto& [base, pre] : {std::pair{model(model::Architecture::llama, "llama3"), std::string("llama-bpe")},
                                  std::pair{spm, std::string()}}) {
    SCOPED_TRACE(base.string());
    io::remove_tree(dir_ / "out");
    const auto c =
        config(base, {"lora_modules_to_save=[embed_tokens, lm_head]", "resize_token_embeddings_to_32x=true"});
    ASSERT_EQ(train(c).steps, 3);
    std::FILE* log = std::tmpfile();
    const auto direct = dir_ / "direct.gguf";
    write_gguf(c, c.output_dir, direct, ops::GgmlType::f16, pre, log);
    // The merged folder under the base's folder name, which the file's general.name is.
    const auto merged = dir_ / "merged" / base.filename();
    io::remove_tree(merged);
    write_merged_folder(c, c.output_dir, merged, at::kFloat, log);
    std::ofstream(dir_ / "merged.yaml") << "base_model: " << merged.string()
                                        << "\nlora_target_linear: true\ndevice: cpu\n";
    const auto again = dir_ / "again.gguf";
    write_gguf(config::load_run_config(dir_ / "merged.yaml", {}), {}, again, ops::GgmlType::f16, pre, log);
    std::fclose(log);
    // The same keys and tensors; a Gemma whose tied head the run unties writes output.weight last,
    // its merged folder's export first (a folder's tensors come in name order), which llama.cpp
    // does not mind.
    const std::string same = std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                             (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/gguf_equal.py").string() + " " +
                             direct.string() + " " + again.string() + " > " + (dir_ / "equal.log").string() + " 2>&1";
    EXPECT_EQ(std::system(same.c_str()), 0) << "export-gguf of the run differs from the export of its merged folder:\n"
                                            << bytes(dir_ / "equal.log");
    const auto ours = bytes(direct);
    for (const char* token : {"<|tool|>", "<think>", "<|new_eos|>", "<|pad|>", "[PAD"}) {
      EXPECT_NE(ours.find(token), std::string::npos) << token;
    }
  }
}

}  // namespace
}  // namespace qtrain::engine::train
