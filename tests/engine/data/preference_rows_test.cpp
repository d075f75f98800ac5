// Note [Preference rows]: rows of text and conversations tokenized into pairs as TRL 1.16's
// DPOTrainer prepares them (scripts/reference/preference_tokenize.py runs its _prepare_dataset),
// on real tokenizers with and without a BOS, through the chatml template: given prompts and
// extracted ones (a space before the difference, a difference inside a UTF-8 character, one
// completion a prefix of the other), completions that end with the EOS text already, multi-turn
// conversations with a system turn. The ids must be equal.
#include "engine/data/preference_rows.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/data/hf_tokenizer.h"
#include "engine/io/remove_tree.h"
#include "engine/text/named_chat_template.h"
#include "tests/expect_error.h"
#include "tests/run_command.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;

TEST(PreferenceRows, TextAndConversationsTokenizeAsTrlsDpoTrainer) {
  if (std::getenv("QTRAIN_PYTHON") == nullptr) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto dir = test::fresh_test_dir(true);
  const std::string jinja = text::named_chat_template("chatml");
  std::ofstream(dir / "chatml.jinja") << jinja;
  const text::ChatTemplate chatml(jinja);
  const auto user = [](const std::string& content) {
    return nlohmann::ordered_json{{"role", "user"}, {"content", content}};
  };
  const auto assistant = [](const std::string& content) {
    return nlohmann::ordered_json{{"role", "assistant"}, {"content", content}};
  };
  const nlohmann::ordered_json system = {{"role", "system"}, {"content", "Answer briefly."}};
  for (const std::string name : {"llama3", "qwen3", "mistral_v01"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = HfTokenizer::load(fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / name);
    const std::string eos = tokenizer.eos_token();
    const std::vector<nlohmann::ordered_json> rows = {
        {{"prompt", "The sky is"}, {"chosen", " blue."}, {"rejected", " green."}},
        {{"chosen", "Q: what is 2+2? A: 4"}, {"rejected", "Q: what is 2+2? A: 5"}},
        {{"chosen", "Réponse : é"}, {"rejected", "Réponse : è"}},
        {{"chosen", "abc"}, {"rejected", "abcd"}},
        {{"prompt", "Say hi."}, {"chosen", " Hi!" + eos}, {"rejected", " No."}},
        {{"prompt", {user("What color is the sky?")}},
         {"chosen", {assistant("It is blue.")}},
         {"rejected", {assistant("It is green.")}}},
        {{"chosen", {system, user("Where is the sun?"), assistant("In the sky.")}},
         {"rejected", {system, user("Where is the sun?"), assistant("In the sea.")}}},
        {{"prompt", {system, user("Hi"), assistant("Hello."), user("Count to 3.")}},
         {"chosen", {assistant("1, 2, 3.")}},
         {"rejected", {assistant("3, 2, 1.")}}},
    };
    {
      std::ofstream out(dir / "rows.jsonl");
      for (const auto& row : rows) out << row.dump() << "\n";
    }
    const auto theirs =
        test::run_command(std::string(std::getenv("QTRAIN_PYTHON")) + " " +
                          (fs::path(QTRAIN_SOURCE_DIR) / "scripts/reference/preference_tokenize.py").string() + " " +
                          (fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / name).string() + " " +
                          (dir / "rows.jsonl").string() + " " + (dir / "chatml.jinja").string());
    ASSERT_EQ(theirs.status, 0);
    std::istringstream lines(theirs.out);
    std::string line;
    for (size_t i = 0; i < rows.size(); ++i) {
      SCOPED_TRACE("row " + std::to_string(i) + ": " + rows[i].dump());
      ASSERT_TRUE(std::getline(lines, line));
      const auto want = nlohmann::json::parse(line);
      const auto got = tokenize_preference_row(rows[i], tokenizer, &chatml, "rows.jsonl:" + std::to_string(i + 1));
      EXPECT_EQ(got.prompt, want.at("prompt_ids").get<std::vector<int64_t>>());
      EXPECT_EQ(got.chosen, want.at("chosen_ids").get<std::vector<int64_t>>());
      EXPECT_EQ(got.rejected, want.at("rejected_ids").get<std::vector<int64_t>>());
    }
  }
  io::remove_tree(dir);
}

TEST(PreferenceRows, FilesMixTokenizedAndTextRowsAndNameTheLineOfABadOne) {
  if (std::getenv("QTRAIN_FIXTURES") == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
  const auto dir = test::fresh_test_dir(true);
  const auto tokenizer = HfTokenizer::load(fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3");
  const PreferenceRowTokenizer text = [&](const nlohmann::ordered_json& row, const std::string& where) {
    return tokenize_preference_row(row, tokenizer, nullptr, where);
  };
  const auto path = dir / "p.jsonl";
  std::ofstream(path) << "{\"prompt_ids\": [1], \"chosen_ids\": [2], \"rejected_ids\": [3]}\n"
                      << "{\"prompt\": \"Hi\", \"chosen\": \" there\", \"rejected\": \" you\"}\n";
  const auto pairs = read_preference_jsonl(path, tokenizer.vocab_size(), text);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[1].chosen.back(), tokenizer.eos_id()) << "the EOS text was appended";
  test::expect_error([&] { read_preference_jsonl(path, tokenizer.vocab_size()); },
                     path.string() + ":2: a preference row of text or messages needs the model's tokenizer");
  std::ofstream(path) << "{\"chosen\": [{\"role\": \"user\", \"content\": \"a\"}], \"rejected\": []}\n";
  test::expect_error([&] { read_preference_jsonl(path, tokenizer.vocab_size(), text); },
                     path.string() +
                         ":1: this preference row is a conversation, and the model's tokenizer has no chat "
                         "template");
  std::ofstream(path) << "{\"prompt\": \"Hi\", \"chosen\": 3, \"rejected\": \" you\"}\n";
  test::expect_error([&] { read_preference_jsonl(path, tokenizer.vocab_size(), text); },
                     path.string() + ":1: \"chosen\" must be text here (the row is not a conversation), found number");
  io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::data
