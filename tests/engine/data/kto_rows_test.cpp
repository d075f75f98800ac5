// Note [KTO rows]: KTO's rows read as TRL's KTOTrainer prepares them (labelled rows, text and
// conversations tokenized as its _prepare_dataset does, pairs unpaired in blocks of 1000, errors
// that name the line), their KL completions rotated within runs of micro_batch_size, and the
// sequential loader that keeps each run one micro-batch.
#include "engine/data/kto_rows.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/data/hf_tokenizer.h"
#include "engine/data/preference_rows.h"
#include "engine/io/remove_tree.h"
#include "engine/text/named_chat_template.h"
#include "tests/expect_error.h"
#include "tests/run_command.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;

class KtoRows : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { io::remove_tree(dir_); }
  fs::path write(const std::string& text) {
    std::ofstream(dir_ / "rows.jsonl") << text;
    return dir_ / "rows.jsonl";
  }
  fs::path dir_ = fs::temp_directory_path() / ("qtrain_kto_rows_" + std::to_string(::getpid()));
};

TEST_F(KtoRows, KlCompletionsRotateWithinRunsOfTheMicroBatchSize) {
  // TRL's map over batches of 3 of 8 rows: [0, 1, 2], [3, 4, 5], [6, 7].
  std::vector<PreferencePair> rows;
  for (int64_t i = 0; i < 8; ++i) rows.push_back({{100 + i}, {i}, {}, i % 2 == 0});
  with_kl_completions(rows, 3);
  const std::vector<int64_t> expected = {2, 0, 1, 5, 3, 4, 7, 6};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].rejected, std::vector<int64_t>{expected[i]}) << i;
    EXPECT_EQ(rows[i].chosen, std::vector<int64_t>{static_cast<int64_t>(i)}) << "its own completion stays";
    EXPECT_EQ(rows[i].prompt, std::vector<int64_t>{100 + static_cast<int64_t>(i)}) << "its own prompt stays";
  }
  // A last run of one row keeps its own completion, as TRL's does.
  std::vector<PreferencePair> three = {{{1}, {1}, {}}, {{2}, {2}, {}}, {{3}, {3}, {}}};
  with_kl_completions(three, 2);
  EXPECT_EQ(three[2].rejected, std::vector<int64_t>{3});
  EXPECT_EQ(three[0].rejected, std::vector<int64_t>{2});
}

TEST_F(KtoRows, LabelledRowsAreReadAndPairsUnpairedInBlocksOfAThousand) {
  const auto rows = read_kto_jsonl(write("{\"prompt_ids\": [1, 2], \"completion_ids\": [3], \"label\": true}\n\n"
                                         "{\"prompt_ids\": [], \"completion_ids\": [4, 5], \"label\": false}\n"),
                                   10);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].prompt, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(rows[0].desirable);
  EXPECT_EQ(rows[1].chosen, (std::vector<int64_t>{4, 5}));
  EXPECT_FALSE(rows[1].desirable);
  EXPECT_TRUE(rows[1].rejected.empty()) << "the KL completion is given later";

  // 1001 pairs: the first 1000's chosen rows, their rejected rows, then the last pair's two.
  std::string pairs;
  for (int i = 0; i < 1001; ++i) {
    pairs += "{\"prompt_ids\": [" + std::to_string(i % 7) + "], \"chosen_ids\": [1], \"rejected_ids\": [2]}\n";
  }
  const auto unpaired = read_kto_jsonl(write(pairs), 10);
  ASSERT_EQ(unpaired.size(), 2002u);
  for (size_t i = 0; i < 2002; ++i) {
    const bool desirable = i < 1000 || i == 2000;
    const size_t pair = i < 2000 ? i % 1000 : 1000;
    EXPECT_EQ(unpaired[i].desirable, desirable) << i;
    EXPECT_EQ(unpaired[i].chosen, std::vector<int64_t>{desirable ? 1 : 2}) << i;
    EXPECT_EQ(unpaired[i].prompt, std::vector<int64_t>{static_cast<int64_t>(pair % 7)}) << i;
  }
}

TEST_F(KtoRows, TextRowsGoThroughTheTokenizerAsAPromptAndOneCompletion) {
  nlohmann::ordered_json seen;
  const PreferenceRowTokenizer text = [&](const nlohmann::ordered_json& row, const std::string&) {
    seen = row;
    return PreferencePair{{1}, {2, 3}, {2, 3}};
  };
  const auto rows =
      read_kto_jsonl(write("{\"prompt\": \"Hi\", \"completion\": \" there\", \"label\": false}\n"), 10, text);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(seen.at("prompt"), "Hi");
  EXPECT_EQ(seen.at("chosen"), " there");
  EXPECT_EQ(rows[0].chosen, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(rows[0].desirable);
}

// Text and conversation rows tokenize as KTOTrainer._prepare_dataset tokenizes them
// (scripts/reference/preference_tokenize.py --kto), on real tokenizers with and without a BOS,
// through the chatml template: plain text (the EOS text appended, or there already, a UTF-8
// boundary), a conversation and a multi-turn one with a system turn. The ids must be equal.
TEST_F(KtoRows, TextAndConversationsTokenizeAsTrlsKtoTrainer) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const std::string jinja = text::named_chat_template("chatml");
  std::ofstream(dir_ / "chatml.jinja") << jinja;
  const text::ChatTemplate chatml(jinja);
  const auto message = [](const std::string& role, const std::string& content) {
    return nlohmann::ordered_json{{"role", role}, {"content", content}};
  };
  for (const std::string name : {"llama3", "qwen3", "mistral_v01"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = HfTokenizer::load(fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / name);
    const std::vector<nlohmann::ordered_json> rows = {
        {{"prompt", "The sky is"}, {"completion", " blue."}, {"label", true}},
        {{"prompt", "Say hi."}, {"completion", " Hi!" + tokenizer.eos_token()}, {"label", false}},
        {{"prompt", "Réponse :"}, {"completion", " é"}, {"label", true}},
        {{"prompt", {message("user", "What color is the sky?")}},
         {"completion", {message("assistant", "It is blue.")}},
         {"label", true}},
        {{"prompt",
          {message("system", "Answer briefly."),
           message("user", "Hi"),
           message("assistant", "Hello."),
           message("user", "Count to 3.")}},
         {"completion", {message("assistant", "1, 2, 3.")}},
         {"label", false}},
    };
    // Pairs, each unpaired into its chosen row and its rejected row, each tokenized on its own: a
    // given prompt whose end merges with a completion's start, an extracted prompt, a conversation.
    const std::vector<nlohmann::ordered_json> pairs = {
        {{"prompt", "x ="}, {"chosen", "="}, {"rejected", " 1"}},
        {{"chosen", "Q: what is 2+2? A: 4"}, {"rejected", "Q: what is 2+2? A: 5"}},
        {{"chosen", {message("user", "Sky?"), message("assistant", "Blue.")}},
         {"rejected", {message("user", "Sky?"), message("assistant", "Green.")}}},
    };
    std::string text;
    for (const auto& row : rows) text += row.dump() + "\n";
    for (const auto& pair : pairs) text += pair.dump() + "\n";
    const auto theirs =
        test::run_command(std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                          (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/preference_tokenize.py").string() +
                          " --kto " + (fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / name).string() + " " +
                          write(text).string() + " " + (dir_ / "chatml.jinja").string());
    ASSERT_EQ(theirs.status, 0) << theirs.out;
    const PreferenceRowTokenizer tokenize = [&](const nlohmann::ordered_json& row, const std::string& where) {
      return tokenize_preference_row(row, tokenizer, &chatml, where);
    };
    // Ours: the KTO rows from one file, each pair from a file of its own (a file is one kind).
    text.clear();
    for (const auto& row : rows) text += row.dump() + "\n";
    auto ours = read_kto_jsonl(write(text), tokenizer.vocab_size(), tokenize);
    ASSERT_EQ(ours.size(), rows.size());
    for (const auto& pair : pairs) {
      const auto two = read_kto_jsonl(write(pair.dump() + "\n"), tokenizer.vocab_size(), tokenize);
      ASSERT_EQ(two.size(), 2u);
      EXPECT_TRUE(two[0].desirable && !two[1].desirable);
      ours.insert(ours.end(), two.begin(), two.end());
    }
    std::istringstream lines(theirs.out);
    std::string line;
    for (size_t i = 0; i < ours.size(); ++i) {
      SCOPED_TRACE("row " + std::to_string(i) + " of ours");
      ASSERT_TRUE(std::getline(lines, line));
      const auto want = nlohmann::json::parse(line);
      EXPECT_EQ(ours[i].prompt, want.at("prompt_ids").get<std::vector<int64_t>>());
      EXPECT_EQ(ours[i].chosen, want.at("completion_ids").get<std::vector<int64_t>>());
      if (i < rows.size()) EXPECT_EQ(ours[i].desirable, rows[i].at("label").get<bool>());
    }
    EXPECT_FALSE(std::getline(lines, line)) << "TRL made more rows: " << line;
  }
}

TEST_F(KtoRows, BadRowsNameTheLineAndTheFix) {
  const auto path = (dir_ / "rows.jsonl").string();
  test::expect_error([&] { read_kto_jsonl(write("{\"prompt_ids\": [1], \"completion_ids\": [2]}\n"), 10); },
                     path + ":1: a KTO row needs \"label\": true (a desirable completion) or false");
  test::expect_error(
      [&] { read_kto_jsonl(write("{\"prompt_ids\": [1], \"completion_ids\": [2], \"label\": 1}\n"), 10); },
      "or false (an undesirable one), got 1");
  test::expect_error(
      [&] { read_kto_jsonl(write("{\"prompt_ids\": [1], \"completion_ids\": [], \"label\": true}\n"), 10); },
      path + ":1: \"completion_ids\" must hold a token");
  test::expect_error(
      [&] { read_kto_jsonl(write("{\"prompt_ids\": [1], \"completion_ids\": [12], \"label\": true}\n"), 10); },
      path + ":1: \"completion_ids\"[0] is 12, outside the model's vocabulary [0, 10)");
  test::expect_error(
      [&] {
        read_kto_jsonl(write("{\"prompt_ids\": [1], \"completion_ids\": [2], \"label\": true}\n"
                             "{\"prompt_ids\": [1], \"chosen_ids\": [2], \"rejected_ids\": [3]}\n"),
                       10);
      },
      path + ":2: the file mixes KTO rows");
  test::expect_error(
      [&] { read_kto_jsonl(write("{\"prompt\": \"a\", \"completion\": \"b\", \"label\": true}\n"), 10); },
      path + ":1: a KTO row of text or messages needs the model's tokenizer");
  test::expect_error([&] { read_kto_jsonl(write("{\"completion\": \"b\", \"label\": true}\n"), 10); },
                     path + ":1: a KTO row needs \"prompt\" and \"completion\"");
}

TEST_F(KtoRows, TheSequentialLoaderVisitsTheRowsInFileOrderEveryEpoch) {
  std::vector<PreferencePair> rows;
  for (int64_t i = 0; i < 5; ++i) rows.push_back({{i}, {i}, {i}, true});
  PairLoader loader(rows, 2, 7, /*sequential=*/true);
  std::vector<int64_t> seen;
  for (int b = 0; b < 6; ++b) {
    for (const auto& p : loader.next()) seen.push_back(p.prompt[0]);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace qtrain::engine::data
