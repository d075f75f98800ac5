// Tests for engine/data/special_tokens: on the Llama-3 stand-in tokenizer, special_tokens give the
// EOS and PAD ids and names that transformers gives after axolotl's add_special_tokens, and an
// alpaca sample ends with the new EOS exactly as the reference builds it
// (scripts/reference/axolotl_settings_reference.py); a token outside the vocabulary is added with
// the next id (and refused with its place, role, token and fix by the byte tokenizer, which
// cannot add one); no tokens leave the tokenizer as it is. The ids of new tokens against
// transformers: tests/engine/train/run_vocabulary_test.cpp.
#include "engine/data/special_tokens.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/dataset.h"
#include "engine/data/hf_tokenizer.h"
#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;

class SpecialTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fixtures = std::getenv("QTRAIN_FIXTURES");
    if (!fixtures) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
    dir_ = test::fresh_test_dir(/*create=*/true);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(fixtures) / "tokenizers" / "llama3" / f, dir_ / f);
    }
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  std::unique_ptr<TextTokenizer> load(const config::SpecialTokens& tokens) const {
    return with_run_tokens(
        std::make_unique<HfTokenizer>(HfTokenizer::load(dir_)), tokens, {}, "tokenizer.json", nullptr);
  }

  fs::path dir_;
};

TEST_F(SpecialTokensTest, RolesAndAlpacaSamplesEqualTheTransformersReference) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (!python || !*python) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  // The stand-in's own EOS is <|eot_id|> and it has no PAD: both roles change.
  config::SpecialTokens tokens;
  tokens.eos_token = "<|end_of_text|>";
  tokens.pad_token = "<|finetune_right_pad_id|>";
  const std::string instruction = "Name a colour.", output = "Blue, of course.";
  const auto out = dir_ / "reference.json";
  const std::string cmd =
      std::string(python) + " " + QTRAIN_SOURCE_DIR + "/scripts/reference/axolotl_settings_reference.py special" +
      " --tokenizer " + dir_.string() +
      " --tokens '{\"eos_token\": \"<|end_of_text|>\", \"pad_token\": \"<|finetune_right_pad_id|>\"}'" + " --prompt '" +
      alpaca_prompt(instruction, "") + "' --output '" + output + "' --out " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto reference = nlohmann::json::parse(std::ifstream(out));

  const auto tokenizer = load(tokens);
  EXPECT_EQ(tokenizer->eos_id(), reference.at("eos_token_id").get<int64_t>());
  EXPECT_EQ(tokenizer->pad_id(), reference.at("pad_token_id").get<int64_t>());
  EXPECT_EQ(tokenizer->eos_token(), reference.at("eos_token").get<std::string>());
  EXPECT_EQ(tokenizer->bos_token(), reference.at("bos_token").get<std::string>());
  // No token was added: the vocabulary is the one qtrain reads.
  EXPECT_EQ(reference.at("vocab_size").get<int64_t>(),
            static_cast<int64_t>(HfTokenizer::load(dir_).tokenizer().vocab_size()));

  std::ofstream(dir_ / "alpaca.jsonl") << nlohmann::json{{"instruction", instruction}, {"output", output}}.dump()
                                       << "\n";
  config::DatasetConfig d;
  d.path = dir_ / "alpaca.jsonl";
  d.type = "alpaca";
  const auto samples = load_dataset(d, tokenizer.get(), 512, /*train_on_inputs=*/false, nullptr);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].input_ids, reference.at("ids").get<std::vector<int64_t>>());
}

TEST_F(SpecialTokensTest, ATokenOutsideTheVocabularyIsAddedOrRefusedByTheByteTokenizer) {
  config::SpecialTokens tokens;
  tokens.pad_token = "[PAD]";
  tokens.place = "run.yaml:12:1";
  const auto size = HfTokenizer::load(dir_).vocab_size();
  std::vector<NewToken> added;
  const auto tokenizer = with_run_tokens(
      std::make_unique<HfTokenizer>(HfTokenizer::load(dir_)), tokens, {"<tool>"}, "tokenizer.json", &added);
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0].content, "[PAD]");
  EXPECT_EQ(added[0].key, "special_tokens.pad_token");
  EXPECT_EQ(added[0].id, size);
  EXPECT_EQ(added[1].key, "tokens");
  EXPECT_EQ(added[1].id, size + 1);
  EXPECT_EQ(tokenizer->pad_id(), size);
  EXPECT_EQ(tokenizer->vocab_size(), size + 2);
  EXPECT_EQ(tokenizer->tokenize("a<tool>[PAD]", false).ids.back(), size);

  auto bytes = [&] { with_run_tokens(std::make_unique<ByteTokenizer>(), tokens, {}, "the byte tokenizer", nullptr); };
  test::expect_error(bytes,
                     "run.yaml:12:1: special_tokens.pad_token: '[PAD]' is not a token of the byte tokenizer, which "
                     "cannot add tokens");
  test::expect_error(bytes, "give the model a tokenizer.json");
}

TEST_F(SpecialTokensTest, NoTokensLeaveTheTokenizersRoles) {
  const auto plain = HfTokenizer::load(dir_);
  const auto same = load({});
  EXPECT_EQ(same->eos_id(), plain.eos_id());
  EXPECT_EQ(same->pad_id(), plain.pad_id());
  EXPECT_EQ(same->eos_token(), "<|eot_id|>");
}

}  // namespace
}  // namespace qtrain::engine::data
