// Tests for engine/train/training_data and engine/data/prepared_cache: dataset_prepared_path
// stores the samples once and reads them back, and any change of the data, the tokenizer files or
// a sample-shaping key gives another entry, so a stale one is never read.
#include "engine/train/training_data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/prepared_cache.h"
#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;

size_t entries(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".jsonl";
  return n;
}

class TrainingDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir(/*create=*/true);
    std::ofstream(dir_ / "data.jsonl") << "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n";
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  config::RunConfig run_config(int sequence_len = 16, const std::string& more = "") const {
    return config::parse_run_config(
        "base_model: model\nlora_target_linear: true\nsequence_len: " + std::to_string(sequence_len) +
            "\ndataset_prepared_path: prepared\n" + more + "datasets:\n  - path: data.jsonl\n    type: completion\n",
        "run.yaml",
        dir_);
  }

  fs::path dir_;
  data::ByteTokenizer tok_;
};

TEST_F(TrainingDataTest, APreparedDatasetIsStoredOnceAndReadBack) {
  const auto c = run_config();
  const auto first = load_training_samples(c, &tok_);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(entries(dir_ / "prepared"), 1u);
  const auto again = load_training_samples(c, &tok_);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].input_ids, first[1].input_ids);
  EXPECT_EQ(again[1].labels, first[1].labels);
  EXPECT_EQ(entries(dir_ / "prepared"), 1u);

  // The entry is what is read: replace it and the run sees the replacement.
  const auto entry = fs::directory_iterator(dir_ / "prepared")->path();
  std::ofstream(entry) << "{\"input_ids\": [7, 8], \"labels\": [7, 8]}\n";
  EXPECT_EQ(load_training_samples(c, &tok_).size(), 1u);

  // A change of the data file, of a sample-shaping key or of the tokenizer files is another entry.
  std::ofstream(dir_ / "data.jsonl") << "{\"text\": \"hello\"}\n{\"text\": \"there\"}\n{\"text\": \"x\"}\n";
  EXPECT_EQ(load_training_samples(c, &tok_).size(), 3u);
  EXPECT_EQ(entries(dir_ / "prepared"), 2u);
  EXPECT_EQ(load_training_samples(run_config(3, "excess_length_strategy: truncate\n"), &tok_)[0].input_ids.size(), 3u);
  EXPECT_EQ(entries(dir_ / "prepared"), 3u);
  // "hello" and "there" are 7 tokens with BOS and EOS: dropped, "x" is kept.
  EXPECT_EQ(load_training_samples(run_config(6), &tok_).size(), 1u);
  EXPECT_EQ(entries(dir_ / "prepared"), 4u);
  EXPECT_EQ(load_training_samples(run_config(6, "excess_length_strategy: truncate\n"), &tok_).size(), 3u);
  EXPECT_EQ(entries(dir_ / "prepared"), 5u);
  fs::create_directories(dir_ / "model");
  std::ofstream(dir_ / "model" / "tokenizer_config.json") << "{}";
  EXPECT_EQ(load_training_samples(c, &tok_).size(), 3u);
  EXPECT_EQ(entries(dir_ / "prepared"), 6u);
  // special_tokens can change the EOS every sample ends with: another entry.
  auto eos = c;
  eos.special_tokens.eos_token = "<|im_end|>";
  EXPECT_EQ(load_training_samples(eos, &tok_).size(), 3u);
  EXPECT_EQ(entries(dir_ / "prepared"), 7u);

  // The number of threads does not shape samples, so it reads the same entry.
  auto threads = c;
  threads.dataset_processes = 5;
  EXPECT_EQ(load_training_samples(threads, &tok_).size(), 3u);
  EXPECT_EQ(entries(dir_ / "prepared"), 7u);
}

// rl: the pairs of a run come from rows of text and conversations (the config's chat_template
// rendering them) and from an axolotl preference type, and a pair whose prompt alone fills sequence_len is dropped and
// counted, as TRL's DPOTrainer drops it.
TEST_F(TrainingDataTest, PreferencePairsComeFromTextAndConversationsAndFullPromptsAreDropped) {
  std::ofstream(dir_ / "pairs.jsonl")
      << "{\"prompt\": \"ab\", \"chosen\": \"c\", \"rejected\": \"d\"}\n"
      << "{\"chosen\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}],"
      << " \"rejected\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"no\"}]}\n"
      << "{\"prompt\": \"a prompt longer than sixty-four bytes, which the byte tokenizer makes as many tokens\","
      << " \"chosen\": \"c\", \"rejected\": \"d\"}\n";
  std::ofstream(dir_ / "intel.jsonl") << "{\"question\": \"q\", \"chosen\": \"a\", \"rejected\": \"b\"}\n";
  const auto c = config::parse_run_config(
      "base_model: model\nlora_target_linear: true\nsequence_len: 64\nrl: dpo\nchat_template: chatml\n"
      "datasets:\n  - path: pairs.jsonl\n  - path: intel.jsonl\n    type: chatml.intel\n",
      "run.yaml",
      dir_);
  char* text = nullptr;
  size_t size = 0;
  std::FILE* log = open_memstream(&text, &size);
  const auto pairs = load_preference_pairs(c, tok_.vocab_size(), &tok_, log);
  std::fclose(log);
  const std::string logged(text, size);
  std::free(text);
  ASSERT_EQ(pairs.size(), 3u);
  // axolotl's chatml.intel writes the prompt and completions in chatml (Note [Preference types]).
  EXPECT_NE(tok_.decode(pairs[2].prompt, false).find("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos);
  EXPECT_EQ(tok_.decode(pairs[2].chosen, false), "a<|im_end|>" + tok_.eos_token());
  EXPECT_EQ(tok_.decode(pairs[0].chosen, false), "c" + tok_.eos_token()) << "the EOS text appended";
  EXPECT_EQ(tok_.decode(pairs[1].prompt, false), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tok_.decode(pairs[1].chosen, false), "yo<|im_end|>\n");
  EXPECT_NE(logged.find("2 preference pairs, 1 whose prompt fills sequence_len 64 dropped"), std::string::npos)
      << logged;
}

// axolotl's user-defined type (`type:` as a map, Note [User-defined type]) turns rows of the
// user's own keys into TRL's text rows: pairs for rl: dpo, KTO's rows for rl: kto.
TEST_F(TrainingDataTest, AUserDefinedTypeFormatsPairsAndKtoRows) {
  std::ofstream(dir_ / "pairs.jsonl") << "{\"instruction\": \"q\", \"sys\": \"S\", \"good\": \"a\", \"bad\": \"b\"}\n"
                                      << "{\"instruction\": \"r\", \"sys\": \"T\", \"good\": \"c\", \"bad\": \"d\"}\n";
  std::ofstream(dir_ / "kto.jsonl") << "{\"q\": \"x\", \"c\": \"y\", \"ok\": true}\n"
                                    << "{\"q\": \"z\", \"c\": \"w\", \"ok\": false}\n";
  const auto load = [&](const std::string& keys, const std::string& type) {
    const auto c = config::parse_run_config("base_model: model\nlora_target_linear: true\nsequence_len: 64\n" + keys +
                                                "datasets:\n  - path: " + type + "\n",
                                            "run.yaml",
                                            dir_);
    return load_preference_pairs(c, tok_.vocab_size(), &tok_, stderr);
  };
  const auto pairs = load("rl: dpo\n",
                          "pairs.jsonl\n    type: {field_prompt: instruction, field_system: sys, field_chosen: good, "
                          "field_rejected: bad, prompt_format: \"{system}|{prompt}>\", chosen_format: \"{chosen}!\"}");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(tok_.decode(pairs[0].prompt, false), tok_.bos_token() + "S|q>") << "TRL tokenizes a text prompt with BOS";
  EXPECT_EQ(tok_.decode(pairs[0].chosen, false), "a!" + tok_.eos_token());
  EXPECT_EQ(tok_.decode(pairs[0].rejected, false), "b" + tok_.eos_token());
  test::expect_error(
      [&] {
        load("rl: dpo\n",
             "pairs.jsonl\n    type: {field_prompt: instruction, prompt_format: "
             "\"{system}|{prompt}>\", field_chosen: good, field_rejected: bad}");
      },
      "pairs.jsonl:1: prompt_format \"{system}|{prompt}>\" names {system}, and the row's \"system\" "
      "(field_system) is absent, empty or not text");
  const auto rows = load("rl: kto\nmicro_batch_size: 2\n",
                         "kto.jsonl\n    type: {field_prompt: q, field_completion: c, field_label: ok, "
                         "completion_format: \"<{completion}>\"}");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(tok_.decode(rows[0].prompt, false), tok_.bos_token() + "x");
  EXPECT_EQ(tok_.decode(rows[0].chosen, false), "<y>" + tok_.eos_token());
  EXPECT_TRUE(rows[0].desirable);
  EXPECT_FALSE(rows[1].desirable);
}

TEST(PreparedCacheTest, TheKeyCoversSettingsAndFileBytes) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  std::ofstream(dir / "a") << "ab";
  std::ofstream(dir / "b") << "";
  const auto key = data::prepared_key({dir / "a"}, "s");
  EXPECT_EQ(key.size(), 16u);
  EXPECT_EQ(data::prepared_key({dir / "a"}, "s"), key);
  EXPECT_NE(data::prepared_key({dir / "a"}, "t"), key);
  EXPECT_NE(data::prepared_key({dir / "b"}, "s"), data::prepared_key({dir / "missing"}, "s"));
  std::ofstream(dir / "a") << "ac";
  EXPECT_NE(data::prepared_key({dir / "a"}, "s"), key);
  EXPECT_FALSE(data::read_prepared(dir, key).has_value());
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::train
