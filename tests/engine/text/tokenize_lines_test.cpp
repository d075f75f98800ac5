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

}  // namespace
}  // namespace qtrain::engine::text::test
