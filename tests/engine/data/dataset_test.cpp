// Tests for engine/data/dataset: each dataset type gives the tokens and loss mask axolotl gives
// (alpaca's prompt byte for byte, masking and train_on_inputs; input_output's segments), long
// samples per excess_length_strategy and dropping, .json files with JSON Lines or an array, and
// the messages for bad files and bad rows (file:line, field, fix).
#include "engine/data/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/pretokenized.h"
#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

std::vector<int64_t> concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/true); }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  config::DatasetConfig file(const std::string& text, const std::string& type, const std::string& name = "data.jsonl") {
    std::ofstream(dir_ / name) << text;
    config::DatasetConfig d;
    d.path = dir_ / name;
    d.type = type;
    return d;
  }

  fs::path dir_;
  ByteTokenizer tok_;
};

TEST_F(DatasetTest, CompletionIsBosTextEosAllTrained) {
  const auto d = file("{\"text\": \"hi\"}\n\n{\"text\": \"caf\\u00e9\", \"other\": 1}\n", "completion");
  const auto samples = load_dataset(d, &tok_, 64, false);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].input_ids, (std::vector<int64_t>{256, 'h', 'i', 257}));
  EXPECT_EQ(samples[0].labels, samples[0].input_ids);
  // JSON's \u00e9 is UTF-8 C3 A9 after parsing.
  EXPECT_EQ(samples[1].input_ids, (std::vector<int64_t>{256, 'c', 'a', 'f', 0xC3, 0xA9, 257}));
  // train_on_inputs changes nothing: a completion has no prompt.
  EXPECT_EQ(load_dataset(d, &tok_, 64, true)[0].labels, samples[0].labels);
}

TEST_F(DatasetTest, CompletionReadsTheConfiguredField) {
  auto d = file("{\"body\": \"ab\", \"text\": 3}\n", "completion");
  d.field = "body";
  EXPECT_EQ(load_dataset(d, &tok_, 64, false)[0].input_ids, (std::vector<int64_t>{256, 'a', 'b', 257}));
}

TEST_F(DatasetTest, AlpacaPromptIsAxolotlsTemplate) {
  // prompters.AlpacaPrompter, style "instruct" (reference/hf-architectures.md §4.3).
  EXPECT_EQ(alpaca_prompt("Add.", "2 and 3"),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n"
            "### Instruction:\nAdd.\n\n### Input:\n2 and 3\n\n### Response:\n");
  EXPECT_EQ(alpaca_prompt("Say hi.", ""),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nSay hi.\n\n### Response:\n");
}

TEST_F(DatasetTest, AlpacaMasksBosAndPromptUnlessTrainOnInputs) {
  const auto d = file(
      "{\"instruction\": \"Add.\", \"input\": \"2 and 3\", \"output\": \"5\"}\n"
      "{\"instruction\": \"Say hi.\", \"output\": \"hi\"}\n"
      "{\"instruction\": \"Say hi.\", \"input\": \"\", \"output\": \"hi\"}\n"
      "{\"instruction\": \"Say hi.\", \"input\": null, \"output\": \"hi\"}\n",
      "alpaca");
  const auto samples = load_dataset(d, &tok_, 1024, false);
  ASSERT_EQ(samples.size(), 4u);

  const auto prompt = tok_.encode(alpaca_prompt("Add.", "2 and 3"));
  EXPECT_EQ(samples[0].input_ids, concat({{256}, prompt, {'5'}, {257}}));
  EXPECT_EQ(samples[0].labels, concat({std::vector<int64_t>(1 + prompt.size(), -100), {'5', 257}}));

  // A missing, empty or null input selects the template without the input section.
  const auto no_input = concat({{256}, tok_.encode(alpaca_prompt("Say hi.", "")), {'h', 'i', 257}});
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(samples[i].input_ids, no_input) << "row " << i;

  const auto trained = load_dataset(d, &tok_, 1024, true);
  for (const auto& s : trained) EXPECT_EQ(s.labels, s.input_ids);
}

// A row too large for memory (a 100 MB row of ids took 3 GB to parse) ends in an error that names
// the file, the line and the row's size, not in a bare std::bad_alloc.
TEST_F(DatasetTest, ARowThatRunsOutOfMemoryIsNamed) {
  std::ofstream(dir_ / "rows.jsonl") << "{\"input_ids\": [1]}\n\n{\"input_ids\": [1, 2, 3]}\n";
  int64_t visited = 0;
  test::expect_error(
      [&] {
        for_each_jsonl_row(dir_ / "rows.jsonl", [&](const auto& row, const auto&) {
          ++visited;
          if (row.at("input_ids").size() > 1) throw std::bad_alloc();
        });
      },
      (dir_ / "rows.jsonl").string() + ":3: reading this row of 2.4e-05 MB ran out of memory");
  EXPECT_EQ(visited, 2);
}

TEST_F(DatasetTest, PretokenizedWithAndWithoutType) {
  const std::string rows = "{\"input_ids\": [5, 6, 7]}\n{\"input_ids\": [1, 2], \"labels\": [-100, 2]}\n";
  for (const std::string type : {"", "pretokenized"}) {
    // No tokenizer needed.
    const auto samples = load_dataset(file(rows, type), nullptr, 8, false);
    ASSERT_EQ(samples.size(), 2u) << type;
    EXPECT_EQ(samples[0].input_ids, (std::vector<int64_t>{5, 6, 7}));
    EXPECT_EQ(samples[0].labels, samples[0].input_ids);
    EXPECT_EQ(samples[1].labels, (std::vector<int64_t>{-100, 2}));
  }
}

TEST_F(DatasetTest, PretokenizedAttentionMaskRemovesPaddingAtEitherEnd) {
  const std::string rows =
      "{\"input_ids\": [5, 6, 7, 0, 0], \"attention_mask\": [1, 1, 1, 0, 0]}\n"
      "{\"input_ids\": [0, 0, 8, 9], \"labels\": [-100, -100, -100, 9], \"attention_mask\": [0, 0, 1, 1]}\n"
      "{\"input_ids\": [3, 4], \"attention_mask\": [1, 1]}\n";
  const auto samples = load_dataset(file(rows, ""), nullptr, 8, false);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].input_ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(samples[0].labels, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(samples[1].input_ids, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(samples[1].labels, (std::vector<int64_t>{-100, 9}));
  EXPECT_EQ(samples[2].input_ids, (std::vector<int64_t>{3, 4}));
}

TEST_F(DatasetTest, PretokenizedIdsOutsideTheVocabularyNameTheRow) {
  const std::string good = "{\"input_ids\": [1, 2]}\n";
  expect_error(
      [&] { load_dataset(file(good + "{\"input_ids\": [1, 2, 10]}\n", ""), nullptr, 8, false, nullptr, {}, 10); },
      "data.jsonl:2: \"input_ids\"[2] is 10, outside the model's vocabulary [0, 10); was the data tokenized "
      "for another model?");
  expect_error([&] { load_dataset(file(good + "{\"input_ids\": [-1, 2]}\n", ""), nullptr, 8, false); },
               "data.jsonl:2: \"input_ids\"[0] is -1, outside the model's vocabulary");
  expect_error(
      [&] {
        load_dataset(
            file(good + "{\"input_ids\": [1, 2], \"labels\": [-100, 11]}\n", ""), nullptr, 8, false, nullptr, {}, 10);
      },
      "data.jsonl:2: \"labels\"[1] is 11, outside the model's vocabulary [0, 10) (or -100, not predicted)");
  // The same ids within the vocabulary load.
  EXPECT_EQ(load_dataset(file(good + "{\"input_ids\": [1, 9]}\n", ""), nullptr, 8, false, nullptr, {}, 10).size(), 2u);
}

TEST_F(DatasetTest, LongSamplesAreDroppedByDefault) {
  const auto d = file("{\"text\": \"abcdef\"}\n{\"text\": \"ab\"}\n", "completion");
  ASSERT_EQ(d.excess_length_strategy, "drop");
  DatasetStats stats;
  const auto samples = load_dataset(d, &tok_, 4, false, &stats);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].input_ids, (std::vector<int64_t>{256, 'a', 'b', 257}));
  EXPECT_EQ(stats.rows, 2);
  EXPECT_EQ(stats.dropped_long, 1);
  EXPECT_EQ(stats.truncated, 0);
  EXPECT_EQ(stats.dropped_untrained, 0);
  // A sample of exactly sequence_len tokens is kept.
  EXPECT_EQ(load_dataset(d, &tok_, 8, false).size(), 2u);

  expect_error([&] { load_dataset(d, &tok_, 3, false); },
               "data.jsonl: none of its 2 samples is kept: 2 are longer than sequence_len 3 "
               "(excess_length_strategy: drop) and 0 have no token to predict");
}

TEST_F(DatasetTest, TruncateCutsLongSamplesAndRaiseNamesTheRow) {
  auto d = file("{\"text\": \"abcdef\"}\n{\"text\": \"ab\"}\n", "completion");
  d.excess_length_strategy = "truncate";
  DatasetStats stats;
  const auto samples = load_dataset(d, &tok_, 4, false, &stats);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].input_ids, (std::vector<int64_t>{256, 'a', 'b', 'c'}));
  EXPECT_EQ(samples[0].labels.size(), 4u);
  EXPECT_EQ(samples[1].input_ids, (std::vector<int64_t>{256, 'a', 'b', 257}));
  EXPECT_EQ(stats.rows, 2);
  EXPECT_EQ(stats.truncated, 1);
  EXPECT_EQ(stats.dropped_long, 0);
  EXPECT_EQ(stats.dropped_untrained, 0);

  auto p = file("{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 2, 3, 4, 5]}\n", "", "p.jsonl");
  p.excess_length_strategy = "truncate";
  EXPECT_EQ(load_dataset(p, nullptr, 3, false, &stats)[1].input_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(stats.truncated, 1);

  p.excess_length_strategy = "raise";
  expect_error([&] { load_dataset(p, nullptr, 3, false); },
               "p.jsonl: row 2 has 5 tokens, more than sequence_len 3; raise sequence_len, shorten the row, or set "
               "excess_length_strategy: drop (or truncate)");
  EXPECT_EQ(load_dataset(p, nullptr, 5, false).size(), 2u);
}

TEST_F(DatasetTest, InputOutputTrainsTheLabelledSegmentsWithoutAddingSpecialTokens) {
  const auto d = file(
      "{\"segments\": [{\"label\": false, \"text\": \"Q: a\\n\"}, {\"label\": true, \"text\": \"b\"}, "
      "{\"label\": false, \"text\": \"\"}]}\n",
      "input_output");
  const auto samples = load_dataset(d, &tok_, 64, false);
  ASSERT_EQ(samples.size(), 1u);
  // No BOS (256) and no EOS (257): the segments are the whole sample.
  EXPECT_EQ(samples[0].input_ids, (std::vector<int64_t>{'Q', ':', ' ', 'a', '\n', 'b'}));
  EXPECT_EQ(samples[0].labels, (std::vector<int64_t>{-100, -100, -100, -100, -100, 'b'}));
  EXPECT_EQ(load_dataset(d, &tok_, 64, true)[0].labels, samples[0].input_ids);

  struct Case {
    std::string row;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"a\"}",
       "data.jsonl:2: \"segments\" is missing; an input_output row is {\"segments\": [{\"label\": false, \"text\": "
       "\"...\"}, {\"label\": true, \"text\": \"...\"}, ...]}"},
      {"{\"segments\": {}}", "data.jsonl:2: \"segments\" must be a list, found object"},
      {"{\"segments\": [\"a\"]}", "data.jsonl:2: segments[0] must be an object"},
      {"{\"segments\": [{\"text\": \"a\"}]}",
       "data.jsonl:2: segments[0].label must be true (trained) or false (not trained), found nothing"},
      {"{\"segments\": [{\"label\": 1, \"text\": \"a\"}]}", "data.jsonl:2: segments[0].label must be true"},
      {"{\"segments\": [{\"label\": true, \"text\": 5}]}",
       "data.jsonl:2: segments[0]: \"text\" must be a string, found number 5"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.row);
    expect_error(
        [&] {
          load_dataset(file("{\"segments\": [{\"label\": true, \"text\": \"ok\"}]}\n" + c.row + "\n", "input_output"),
                       &tok_,
                       64,
                       false);
        },
        c.fragment);
  }
}

TEST_F(DatasetTest, AJsonFileHoldsJsonLinesOrOneArrayOfRows) {
  const auto lines =
      load_dataset(file("{\"text\": \"hi\"}\n{\"text\": \"yo\"}\n", "completion", "lines.json"), &tok_, 8, false);
  const auto array = load_dataset(
      file(" \n[{\"text\": \"hi\"},\n {\"text\": \"yo\"}]\n", "completion", "array.json"), &tok_, 8, false);
  ASSERT_EQ(array.size(), 2u);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(array[1].input_ids, (std::vector<int64_t>{256, 'y', 'o', 257}));
  EXPECT_EQ(array[1].input_ids, lines[1].input_ids);
  expect_error(
      [&] { load_dataset(file("[{\"text\": \"hi\"}, {\"body\": 1}]", "completion", "a.json"), &tok_, 8, false); },
      "a.json: row [1]: missing \"text\"");
  expect_error([&] { load_dataset(file("[{\"text\": \"hi\"}, 3]", "completion", "a.json"), &tok_, 8, false); },
               "a.json: row [1]: each row must be one JSON object, found a JSON number");
  expect_error([&] { load_dataset(file("[{\"text\": \"hi\"},", "completion", "a.json"), &tok_, 8, false); },
               "a.json: not a valid JSON array of rows (");
}

TEST_F(DatasetTest, DropsSamplesWithNothingToPredict) {
  // The first prompt fills the window (only masked tokens left); the second row predicts "5".
  auto d = file("{\"instruction\": \"" + std::string(100, 'x') +
                    "\", \"output\": \"y\"}\n"
                    "{\"instruction\": \"Add.\", \"output\": \"5\"}\n",
                "alpaca");
  d.excess_length_strategy = "truncate";
  const auto prompt_len = static_cast<int64_t>(1 + alpaca_prompt("Add.", "").size());
  DatasetStats stats;
  const auto samples = load_dataset(d, &tok_, prompt_len + 1, false, &stats);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].input_ids.back(), '5');
  EXPECT_EQ(stats.rows, 2);
  EXPECT_EQ(stats.truncated, 2);
  EXPECT_EQ(stats.dropped_untrained, 1);
  // With train_on_inputs the prompt itself is predicted: nothing is dropped.
  EXPECT_EQ(load_dataset(d, &tok_, prompt_len + 1, true).size(), 2u);
  // A pre-tokenized row whose labels are all -100 (apart from the never-predicted first one).
  const auto p = file("{\"input_ids\": [1, 2], \"labels\": [1, -100]}\n{\"input_ids\": [3, 4]}\n", "", "p.jsonl");
  EXPECT_EQ(load_dataset(p, nullptr, 8, false).size(), 1u);

  expect_error([&] { load_dataset(d, &tok_, 20, false); },
               "data.jsonl: none of its 2 samples is kept: 0 are longer than sequence_len 20 (excess_length_strategy: "
               "drop) and 2 have no token to predict (prompts fill the window or labels are all -100); raise "
               "sequence_len or set train_on_inputs: true");
}

TEST_F(DatasetTest, BadFilesAndTypes) {
  const std::string row = "{\"text\": \"hi\"}\n";
  expect_error([&] { load_dataset(file(row, "", "data.parquet"), &tok_, 8, false); },
               "data.parquet: unsupported dataset file format '.parquet'; qtrain reads JSON Lines (.jsonl, one JSON "
               "object per line) or a JSON array of rows (.json)");
  expect_error([&] { load_dataset(file(row, "", "data"), &tok_, 8, false); }, "format '(no extension)'");
  // Upper case is still JSONL.
  EXPECT_EQ(load_dataset(file(row, "completion", "DATA.JSONL"), &tok_, 8, false).size(), 1u);

  for (const std::string type : {"completion", "alpaca", "input_output", "chat_template"}) {
    expect_error([&] { load_dataset(file(row, type), nullptr, 8, false); },
                 "data.jsonl: dataset type '" + type + "' needs a tokenizer; this model has no tokenizer.json");
  }
  expect_error([&] { load_dataset(file(row, "sharegpt"), &tok_, 8, false); },
               "dataset type 'sharegpt' is not one of completion, alpaca, input_output, chat_template, pretokenized");
  config::DatasetConfig missing;
  missing.path = dir_ / "absent.jsonl";
  missing.type = "completion";
  expect_error([&] { load_dataset(missing, &tok_, 8, false); },
               "absent.jsonl: cannot open the dataset file (does it exist, is it readable?)");
  expect_error([&] { load_dataset(file("\n \n", "completion"), &tok_, 8, false); },
               "data.jsonl: the dataset has no rows");
  expect_error([&] { load_dataset(file(row, "completion"), &tok_, 1, false); }, "sequence_len must be at least 2");
}

TEST_F(DatasetTest, BadRowsNameLineFieldAndFix) {
  struct Case {
    std::string type;
    std::string row;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"completion",
       "{\"body\": \"x\"}",
       "data.jsonl:3: missing \"text\"; a completion row holds its text in \"text\" (this row has keys: body); set "
       "the dataset's `field:` to the key that holds the text"},
      {"completion", "{}", "(this row has keys: none)"},
      {"completion", "{\"text\": 42}", "data.jsonl:3: \"text\" must be a string, found number 42"},
      {"completion", "{\"text\": null}", "data.jsonl:3: missing \"text\""},
      {"completion", "{\"text\": \"\"}", "data.jsonl:3: \"text\" is empty; fill it in or remove the line"},
      {"alpaca",
       "{\"instruction\": \"a\"}",
       "data.jsonl:3: missing \"output\"; an alpaca row is {\"instruction\": ..., \"input\": ... (optional), "
       "\"output\": ...}"},
      {"alpaca", "{\"output\": \"a\"}", "data.jsonl:3: missing \"instruction\""},
      {"alpaca",
       "{\"instruction\": [\"a\"], \"output\": \"b\"}",
       "data.jsonl:3: \"instruction\" must be a string, found array [\"a\"]"},
      {"alpaca",
       "{\"instruction\": \"a\", \"input\": 1, \"output\": \"b\"}",
       "data.jsonl:3: \"input\" must be a string, found number 1"},
      {"alpaca", "{\"instruction\": \"a\", \"output\": \"\"}", "data.jsonl:3: \"output\" is empty"},
      {"alpaca", "{\"instruction\": \"\", \"output\": \"b\"}", "data.jsonl:3: \"instruction\" is empty"},
      {"completion", "{\"text\": \"a\"", "data.jsonl:3: not valid JSON ("},
      {"completion", "[\"a\"]", "data.jsonl:3: each line must be one JSON object, found a JSON array"},
      {"",
       "{\"text\": \"a\"}",
       "data.jsonl:3: a pre-tokenized row needs \"input_ids\"; for text rows give the dataset a type"},
      {"pretokenized", "{\"input_ids\": [1, \"2\"]}", "data.jsonl:3: \"input_ids\" must hold integers, found \"2\""},
      {"",
       "{\"input_ids\": [1, 2], \"labels\": [1]}",
       "data.jsonl:3: \"labels\" has 1 entries but \"input_ids\" has 2"},
      {"",
       "{\"input_ids\": [1, 2, 3], \"attention_mask\": [1, 0, 1]}",
       "data.jsonl:3: \"attention_mask\"[1] is 0 between 1s; qtrain takes padding only at the start or end of a row"},
      {"", "{\"input_ids\": [1, 2], \"attention_mask\": [0, 0]}", "data.jsonl:3: \"attention_mask\" is all 0"},
      {"",
       "{\"input_ids\": [1, 2], \"attention_mask\": [1, 2]}",
       "data.jsonl:3: \"attention_mask\"[1] is 2; it must hold 0"},
      {"",
       "{\"input_ids\": [1, 2], \"attention_mask\": [1]}",
       "\"attention_mask\" has 1 entries but \"input_ids\" has 2"},
  };
  // A good row, a blank line (skipped, but counted), then the bad row on line 3.
  for (const auto& c : cases) {
    const std::string good = c.type == "alpaca"       ? "{\"instruction\": \"i\", \"output\": \"o\"}"
                             : c.type == "completion" ? "{\"text\": \"t\"}"
                                                      : "{\"input_ids\": [1, 2]}";
    SCOPED_TRACE(c.row);
    expect_error([&] { load_dataset(file(good + "\n\n" + c.row + "\n", c.type), &tok_, 64, false); }, c.fragment);
  }
}

}  // namespace
}  // namespace qtrain::engine::data
