// What qtrain generate reads as prompts and how it ends completions: the JSONL forms, the chat
// template chosen on the command line or in the config, plain prompts wrapped as user messages,
// and the stop ids from the tokenizer, eot_tokens and generation_config.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/data/byte_tokenizer.h"
#include "engine/generate/prompts.h"
#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::generate {
namespace {

namespace fs = std::filesystem;

TEST(Prompts, JsonlLinesArePromptsConversationsOrStrings) {
  std::istringstream in(
      "{\"prompt\": \"a\"}\n\n{\"text\": \"b\"}\n\"c\"\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"d\"}]}\r\n"
      "{\"conversations\": [{\"role\": \"user\", \"content\": \"e\"}]}\n");
  const auto p = read_prompts(in, "p.jsonl", false);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0].text, "a");
  EXPECT_EQ(p[1].text, "b");
  EXPECT_EQ(p[2].text, "c");
  EXPECT_FALSE(p[2].is_chat());
  EXPECT_TRUE(p[3].is_chat());
  EXPECT_EQ(p[4].messages[0]["content"], "e");
  std::istringstream plain("x y\n\nz\n");
  const auto lines = read_prompts(plain, "stdin", true);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "x y");
  std::istringstream bad("{\"prompt\": \"a\"}\n{\"prompt\": 3}\n");
  test::expect_error([&] { read_prompts(bad, "p.jsonl", false); }, "p.jsonl:2: \"prompt\" must be a string");
  std::istringstream empty("{\"messages\": []}\n");
  test::expect_error([&] { read_prompts(empty, "p.jsonl", false); }, "p.jsonl:1: \"messages\" must be a non-empty");
  std::istringstream broken("{\"prompt\": \n");
  test::expect_error([&] { read_prompts(broken, "p.jsonl", false); }, "p.jsonl:1: not JSON");
}

TEST(Prompts, TheChatTemplateComesFromTheCommandLineTheConfigOrTheTokenizer) {
  const data::ByteTokenizer tokenizer;  // has no template of its own
  config::RunConfig c;
  const auto dir = test::fresh_test_dir(/*create=*/true);
  EXPECT_FALSE(chat_template_source(c, "", dir, tokenizer).has_value());
  const auto chatml = chat_template_source(c, "chatml", dir, tokenizer);
  ASSERT_TRUE(chatml.has_value());
  EXPECT_NE(chatml->find("<|im_start|>"), std::string::npos);
  std::ofstream(dir / "mine.jinja") << "{% for m in messages %}[{{ m.content }}]{% endfor %}";
  EXPECT_EQ(*chat_template_source(c, (dir / "mine.jinja").string(), dir, tokenizer),
            "{% for m in messages %}[{{ m.content }}]{% endfor %}");
  test::expect_error([&] { chat_template_source(c, "no_such_template", dir, tokenizer); },
                     "--chat-template no_such_template is neither a .jinja file nor a template name");
  // The config's, a relative chat_template_jinja from the config's folder.
  c.chat_template = "jinja";
  c.chat_template_jinja = "mine.jinja";
  EXPECT_EQ(*chat_template_source(c, "", dir, tokenizer), "{% for m in messages %}[{{ m.content }}]{% endfor %}");

  // --chat: a plain prompt is a user message after the system message.
  const PromptEncoder encoder(tokenizer, chat_template_source(c, "", dir, tokenizer), true, "be brief");
  EXPECT_EQ(encoder.encode({"hi", nullptr}), tokenizer.encode("[be brief][hi]"));
  const PromptEncoder plain(tokenizer, std::nullopt, false, "");
  EXPECT_EQ(plain.encode({"hi", nullptr}), tokenizer.tokenize("hi", true).ids) << "with the tokenizer's BOS";
  test::expect_error(
      [&] {
        plain.encode({"", nlohmann::ordered_json::array({{{"role", "user"}, {"content", "x"}}})});
      },
      "a chat prompt needs a chat template");
  io::remove_tree(dir);
}

TEST(Prompts, StopIdsAreTheEosTheEotTokensAndTheGenerationConfigs) {
  const data::ByteTokenizer tokenizer;
  const auto dir = test::fresh_test_dir(/*create=*/true);
  config::RunConfig c;
  c.base_model = dir;
  EXPECT_EQ(stop_ids(c, tokenizer), std::vector<int64_t>{tokenizer.eos_id()});
  c.eot_tokens = {"<pad>"};
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [257, 10, 258]})";
  EXPECT_EQ(stop_ids(c, tokenizer), (std::vector<int64_t>{257, 258, 10}));
  c.eot_tokens = {"<nope>"};
  test::expect_error([&] { stop_ids(c, tokenizer); }, "eot_tokens: '<nope>' is not a token");
  io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::generate
