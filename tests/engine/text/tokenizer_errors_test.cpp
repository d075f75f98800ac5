// Tables of damaged tokenizer.json files, each a small edit of a valid one, and of broken chat
// templates: every one is refused with an error that names the file (or template) and the place
// in it (a JSON path, a line:column) and says what is expected, never a crash, a hang or a
// tokenizer or template that silently does something else. See docs/RELIABILITY.md, "Bad-input
// tests".
#include <gtest/gtest.h>

#include <functional>

#include "engine/text/chat_template.h"
#include "engine/text/jinja_error.h"
#include "engine/text/text_error.h"
#include "tests/engine/text/tiny_tokenizer.h"

namespace qtrain::engine::text::test {
namespace {

struct BadTokenizer {
  std::string what;
  std::function<void(nlohmann::json&)> edit;
  std::string fragment;  // after "tiny/tokenizer.json: "
};

nlohmann::json valid() {
  auto j = tiny_json({"a", "b", "ab", "<s>"}, nlohmann::json::array({"a b"}));
  j["added_tokens"].push_back(added(3, "<s>"));
  return j;
}

TEST(TokenizerErrors, EveryDamagedFileIsRefusedNamingThePlace) {
  ASSERT_NO_THROW(make(valid()));
  const std::vector<BadTokenizer> rows = {
      {"no model", [](auto& j) { j.erase("model"); }, "model"},
      {"model not an object", [](auto& j) { j["model"] = 3; }, "model"},
      {"unknown model type", [](auto& j) { j["model"]["type"] = "Unigram"; }, "model.type"},
      {"dropout", [](auto& j) { j["model"]["dropout"] = 0.5; }, "model.dropout"},
      {"vocab not an object", [](auto& j) { j["model"]["vocab"] = nlohmann::json::array(); }, "model.vocab"},
      {"negative id", [](auto& j) { j["model"]["vocab"]["a"] = -1; }, "model.vocab.a"},
      {"id not a number", [](auto& j) { j["model"]["vocab"]["a"] = "zero"; }, "model.vocab.a"},
      {"huge id", [](auto& j) { j["model"]["vocab"]["a"] = 1 << 30; }, "model.vocab.a"},
      {"unk token outside the vocab", [](auto& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token"},
      {"merges not a list", [](auto& j) { j["model"]["merges"] = "a b"; }, "model.merges"},
      {"merge of one part", [](auto& j) { j["model"]["merges"] = {"ab"}; }, "model.merges[0]"},
      {"merge outside the vocab", [](auto& j) { j["model"]["merges"] = {"b a"}; }, "model.merges[0]"},
      {"merge pair of three",
       [](auto& j) {
         j["model"]["merges"] = {{"a", "b", "c"}};
       },
       "model.merges[0]"},
      {"fuse_unk not a bool", [](auto& j) { j["model"]["fuse_unk"] = "yes"; }, "model.fuse_unk"},
      {"added_tokens not a list", [](auto& j) { j["added_tokens"] = 1; }, "added_tokens"},
      {"added token without content", [](auto& j) { j["added_tokens"][0].erase("content"); }, "added_tokens[0]"},
      {"added token id not a number", [](auto& j) { j["added_tokens"][0]["id"] = "3"; }, "added_tokens[0]"},
      {"added token unknown key", [](auto& j) { j["added_tokens"][0]["colour"] = 1; }, "added_tokens[0]"},
      {"unknown normalizer",
       [](auto& j) {
         j["normalizer"] = {{"type", "Shouting"}};
       },
       "normalizer"},
      {"normalizer without type", [](auto& j) { j["normalizer"] = nlohmann::json::object(); }, "normalizer"},
      {"unknown pre-tokenizer",
       [](auto& j) {
         j["pre_tokenizer"] = {{"type", "Guess"}};
       },
       "pre_tokenizer"},
      {"split without pattern",
       [](auto& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}};
       },
       "pre_tokenizer"},
      {"bad regex",
       [](auto& j) {
         j["pre_tokenizer"] = {
             {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
       },
       "pre_tokenizer"},
      {"unknown post-processor",
       [](auto& j) {
         j["post_processor"] = {{"type", "Magic"}};
       },
       "post_processor"},
      {"template naming a missing token",
       [](auto& j) {
         j["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single",
              {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
             {"pair", nlohmann::json::array()},
             {"special_tokens", nlohmann::json::object()}};
       },
       "post_processor"},
      // Found by fuzz/tokenizer_fuzz: a float id was converted to int with undefined behaviour.
      {"added token id a huge float",
       [](auto& j) { j["added_tokens"][0]["id"] = 2.22222e55; },
       "added_tokens[0].id: expected an integer from -2147483648 to 2147483647, got 2.22222e+55"},
      {"added token id a fraction", [](auto& j) { j["added_tokens"][0]["id"] = 3.5; }, "added_tokens[0].id"},
      {"added token id beyond int32",
       [](auto& j) { j["added_tokens"][0]["id"] = int64_t{1} << 40; },
       "added_tokens[0].id"},
      // Found by fuzz/tokenizer_fuzz too: a float in a special token's ids list (1.66667e39).
      {"template special token id a huge float",
       [](auto& j) {
         j["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single",
              {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
             {"pair", nlohmann::json::array()},
             {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {1.66667e39}}, {"tokens", {"<bos>"}}}}}}};
       },
       "post_processor.special_tokens.<bos>.ids: element 0: expected an integer from -2147483648 to 2147483647, got "
       "1.66667e+39"},
      {"strip decoder start negative",
       [](auto& j) {
         j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}};
       },
       "decoder.start"},
      {"unknown decoder",
       [](auto& j) {
         j["decoder"] = {{"type", "Reverse"}};
       },
       "decoder"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.what);
    auto j = valid();
    row.edit(j);
    try {
      make(j);
      ADD_FAILURE() << "no error";
    } catch (const TokenizerError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tiny/tokenizer.json: " + row.fragment), std::string::npos) << what;
    }
  }
  // Not JSON at all, and JSON of another kind.
  for (const std::string text : {"{\"model\": ", "[1, 2, 3]", ""}) {
    SCOPED_TRACE(text);
    EXPECT_THROW(Tokenizer::from_json(text, "tiny/tokenizer.json"), TokenizerError);
  }
}

struct BadTemplate {
  std::string source;
  std::string fragment;  // the place: "'bad' line:column" or the offending text
};

TEST(TemplateErrors, EveryBrokenTemplateIsRefusedNamingTheTemplateAndThePlace) {
  const std::vector<BadTemplate> rows = {
      {"{% for m in messages %}{{ m.content }}", "'bad'"},               // unclosed for
      {"{% if true %}x", "'bad'"},                                       // unclosed if
      {"{{ messages[0].content ", "'bad'"},                              // unclosed expression
      {"{% endfor %}", "'bad'"},                                         // stray end
      {"{{ messages | no_such_filter }}", "no_such_filter"},             // unknown filter
      {"{% frobnicate %}", "frobnicate"},                                // unknown statement
      {"{{ 'a' + 1 }}", "'bad'"},                                        // wrong types
      {"{{ messages[0].content.no_such_method() }}", "no_such_method"},  // unknown method
      {"{{ 1 / 0 }}", "'bad'"},                                          // division by zero
      {"{{ messages[99].content }}", "'bad'"},                           // index out of range
      {"{% set x = %}", "'bad'"},                                        // missing value
      {"{{ range(10000000000) | length }}", "'bad'"},                    // a range too large
      {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "'bad'"},      // unbounded recursion
      {"{{ raise_exception('refused by the template') }}", "refused by the template"},
  };
  ChatTemplateInput in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  for (const auto& row : rows) {
    SCOPED_TRACE(row.source);
    try {
      ChatTemplate t(row.source, "bad");
      t.render(in);
      ADD_FAILURE() << "no error";
    } catch (const TemplateError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(row.fragment), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace qtrain::engine::text::test
