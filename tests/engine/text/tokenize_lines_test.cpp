// tokenize_lines (the work of `qtrain tokenize`): one JSON array of ids per input line, equal
// to HF's ids for that line.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <gtest/gtest.h>

#include "engine/text/tokenize_lines.h"
#include "tests/engine/text/tiny_tokenizer.h"

namespace qtrain::engine::text::test {
namespace {

TEST(TokenizeLines, OneJsonArrayPerLineEqualToHf) {
  const char* fixtures = std::getenv("QTRAIN_FIXTURES");
  ASSERT_NE(fixtures, nullptr) << "run through ctest";
  std::ifstream f(std::filesystem::path(fixtures) / "tokenizers" / "cases.json");
  const auto ref = nlohmann::json::parse(f);
  for (const auto& t : ref["tokenizers"]) {
    if (t["name"] != "llama3") continue;
    std::string input;
    std::vector<nlohmann::json> want;
    for (const auto& c : t["cases"]) {
      const auto text = c["text"].get<std::string>();
      if (text.find_first_of("\r\n") != std::string::npos) continue;
      input += text + "\n";
      want.push_back(c["ids_special"]);
    }
    const auto tok = Tokenizer::load(t["dir"].get<std::string>());
    std::istringstream in(input);
    std::ostringstream out;
    EXPECT_EQ(tokenize_lines(tok, in, out, true), want.size());
    std::istringstream lines(out.str());
    std::string line;
    size_t i = 0;
    while (std::getline(lines, line)) {
      ASSERT_LT(i, want.size());
      EXPECT_EQ(nlohmann::json::parse(line), want[i]) << "line " << i + 1;
      ++i;
    }
    EXPECT_EQ(i, want.size());
    EXPECT_GT(i, 50u);
    return;
  }
  FAIL() << "no llama3 stand-in in cases.json";
}

TEST(TokenizeLines, ABadLineIsNamed) {
  const auto t = make(tiny_json({"a"}, nlohmann::json::array()));
  std::istringstream in("a\na\xFF\n");
  std::ostringstream out;
  try {
    tokenize_lines(t, in, out, false);
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2 of the input"), std::string::npos) << e.what();
  }
  EXPECT_EQ(out.str(), "[0]\n");
}

// --chat: the conversation rendered, then tokenized without special tokens; both input shapes;
// what goes wrong names the line. (Parity with apply_chat_template: Commands.TokenizeChat...)
TEST(TokenizeChatLines, RendersEachConversationAndNamesBadLines) {
  const auto t = make(tiny_json({"a", "b", "<", ">"}, nlohmann::json::array()));
  const ChatTemplate chat(
      "{% for m in messages %}<{{ m.content }}>{% endfor %}{% if tools %}{% for t in tools %}>{% endfor %}{% endif %}",
      "t");
  std::istringstream in(R"([{"role": "user", "content": "a"}])"
                        "\n"
                        R"({"messages": [{"role": "user", "content": "b"}], "tools": [1, 2]})"
                        "\n");
  std::ostringstream out;
  EXPECT_EQ(tokenize_chat_lines(t, chat, in, out, false), 2u);
  EXPECT_EQ(out.str(), "[2, 0, 3]\n[2, 1, 3, 3, 3]\n");

  for (const auto& [line, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "line 2 of the input: not JSON"},
           {R"({"turns": []})", "line 2 of the input: the object has no \"messages\""},
           {R"({"messages": "hi"})", "line 2 of the input: the messages are string, not a list"},
           {R"([{"role": "user", "content": "a"}, "x"])", "line 2 of the input: "},
       }) {
    std::istringstream bad("[]\n" + line + "\n");
    std::ostringstream ignored;
    try {
      tokenize_chat_lines(t, chat, bad, ignored, false);
      ADD_FAILURE() << "no error for " << line;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace qtrain::engine::text::test
