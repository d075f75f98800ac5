// Tests for engine/data/chat_dataset (type chat_template) and the Hugging Face tokenizer path of
// completion and alpaca: input_ids and labels equal those scripts/reference/chat_data_reference.py
// makes with transformers (apply_chat_template + offsets) for every roles_to_train and
// train_on_eos setting; key mappings; bad rows name file:line, field and fix; samples without a
// trained token are dropped and counted.
#include "engine/data/chat_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/dataset.h"
#include "engine/data/hf_tokenizer.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

// ChatML, as Qwen's templates write turns.
constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Multi-turn conversations with a system prompt, the built-in aliases (human, gpt), non-ASCII
// content, content with surrounding spaces, an empty assistant turn (trains nothing), and a
// conversation that ends with a user turn.
constexpr const char* kRows =
    R"({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there, café?"}, {"role": "assistant", "content": "Hello! ☕ yes."}, {"role": "human", "content": "More"}, {"role": "gpt", "content": " spaced answer \n"}]})"
    "\n"
    R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]})"
    "\n"
    R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3"}, {"role": "assistant", "content": "6, of course"}]})"
    "\n"
    R"({"messages": [{"role": "system", "content": "sys"}, {"role": "assistant", "content": "first"}, {"role": "user", "content": "last word"}]})"
    "\n";

class ChatDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fixtures = std::getenv("QTRAIN_FIXTURES");
    if (!fixtures) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
    dir_ = test::fresh_test_dir(/*create=*/true);
    // The Qwen3 stand-in tokenizer (scripts/reference/make_test_tokenizers.py) with a ChatML template.
    tokenizer_dir_ = dir_ / "qwen3";
    fs::create_directories(tokenizer_dir_);
    const fs::path source = fs::path(fixtures) / "tokenizers" / "qwen3";
    fs::copy_file(source / "tokenizer.json", tokenizer_dir_ / "tokenizer.json");
    auto config = nlohmann::ordered_json::parse(std::ifstream(source / "tokenizer_config.json"));
    config["chat_template"] = kChatMl;
    std::ofstream(tokenizer_dir_ / "tokenizer_config.json") << config.dump();
    tok_ = std::make_unique<HfTokenizer>(HfTokenizer::load(tokenizer_dir_));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  config::DatasetConfig file(const std::string& text, const std::string& type = "chat_template") {
    std::ofstream(dir_ / "data.jsonl") << text;
    config::DatasetConfig d;
    d.path = dir_ / "data.jsonl";
    d.type = type;
    return d;
  }

  fs::path dir_, tokenizer_dir_;
  std::unique_ptr<HfTokenizer> tok_;
};

TEST_F(ChatDatasetTest, LabelsEqualTheTransformersReference) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (!python || !*python) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const std::vector<std::vector<std::string>> role_sets = {{"assistant"}, {"user", "assistant"}, {"system"}};
  const std::vector<std::string> eos_settings = {"turn", "all", "last", "none"};
  // One reference run for every setting ("ROLES:EOS" cases).
  const auto data = file(kRows).path;
  std::string cases;
  for (const auto& roles : role_sets) {
    for (const auto& eos : eos_settings) {
      std::string joined;
      for (const auto& r : roles) joined += (joined.empty() ? "" : ",") + r;
      cases += " " + joined + ":" + eos;
    }
  }
  const auto out = dir_ / "reference.json";
  const std::string cmd = std::string(python) + " " + QTRAIN_SOURCE_DIR +
                          "/scripts/reference/chat_data_reference.py --tokenizer " + tokenizer_dir_.string() +
                          " --data " + data.string() + " --out " + out.string() + " --cases" + cases;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto reference = nlohmann::json::parse(std::ifstream(out));

  for (const auto& roles : role_sets) {
    for (const auto& eos : eos_settings) {
      std::string joined;
      for (const auto& r : roles) joined += (joined.empty() ? "" : ",") + r;
      const std::string name = joined + ":" + eos;
      SCOPED_TRACE("roles_to_train: " + joined + ", train_on_eos: " + eos);
      config::DatasetConfig d;
      d.path = data;
      d.type = "chat_template";
      d.roles_to_train = roles;
      d.train_on_eos = eos;
      // load_dataset drops samples without a trained token; the reference writes every row.
      std::vector<Sample> expected;
      for (const auto& j : reference.at(name)) {
        Sample s{j.at("input_ids").get<std::vector<int64_t>>(), j.at("labels").get<std::vector<int64_t>>()};
        if (std::any_of(s.labels.begin() + 1, s.labels.end(), [](int64_t l) { return l != -100; })) {
          expected.push_back(std::move(s));
        }
      }
      DatasetStats stats;
      const auto samples = load_dataset(d, tok_.get(), 4096, false, &stats);
      EXPECT_EQ(stats.rows, 4);
      EXPECT_EQ(stats.dropped, static_cast<int64_t>(4 - expected.size()));
      ASSERT_EQ(samples.size(), expected.size());
      for (size_t i = 0; i < samples.size(); ++i) {
        EXPECT_EQ(samples[i].input_ids, expected[i].input_ids) << "sample " << i;
        EXPECT_EQ(samples[i].labels, expected[i].labels) << "sample " << i;
      }
    }
  }
}

TEST_F(ChatDatasetTest, TrainsTheAssistantContentAndItsEndOfTurn) {
  const auto samples =
      load_dataset(file(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"
                        "\n"),
                   tok_.get(),
                   4096,
                   false);
  ASSERT_EQ(samples.size(), 1u);
  const auto expected_ids =
      tok_->tokenize("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n", false).ids;
  EXPECT_EQ(samples[0].input_ids, expected_ids);
  const auto yo = tok_->tokenize("Yo", false).ids;
  std::vector<int64_t> trained;
  for (const auto l : samples[0].labels) {
    if (l != -100) trained.push_back(l);
  }
  auto expected = yo;
  expected.push_back(*tok_->id_of("<|im_end|>"));
  EXPECT_EQ(trained, expected);
}

TEST_F(ChatDatasetTest, MappedKeysAndRolesGiveTheSameSample) {
  const auto plain =
      load_dataset(file(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"
                        "\n"),
                   tok_.get(),
                   4096,
                   false);
  auto d = file(R"({"conversations": [{"from": "asker", "value": "Hi"}, {"from": "bot", "value": "Yo"}]})"
                "\n");
  d.field_messages = "conversations";
  d.message_role = "from";
  d.message_content = "value";
  d.roles = {{"asker", "user"}, {"bot", "assistant"}};
  const auto mapped = load_dataset(d, tok_.get(), 4096, false);
  ASSERT_EQ(mapped.size(), 1u);
  EXPECT_EQ(mapped[0].input_ids, plain[0].input_ids);
  EXPECT_EQ(mapped[0].labels, plain[0].labels);
}

TEST_F(ChatDatasetTest, SamplesWithoutATrainedTokenAreDroppedAndCounted) {
  DatasetStats stats;
  const auto samples =
      load_dataset(file(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
                        "\n"
                        R"({"messages": [{"role": "user", "content": "only a question"}]})"
                        "\n"),
                   tok_.get(),
                   4096,
                   false,
                   &stats);
  EXPECT_EQ(samples.size(), 1u);
  EXPECT_EQ(stats.rows, 2);
  EXPECT_EQ(stats.dropped, 1);
}

TEST_F(ChatDatasetTest, BadRowsNameTheFileLineFieldAndFix) {
  const std::string good = R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  struct Case {
    std::string row;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {R"({"conversations": []})",
       "data.jsonl:3: missing \"messages\"; a chat_template row is {\"messages\": [{\"role\": \"user\", \"content\": "
       "\"...\"}, ...]}; set the dataset's field_messages: to the key that holds the conversation"},
      {R"({"messages": []})", "data.jsonl:3: \"messages\" is an empty conversation; remove the line"},
      {R"({"messages": "hi"})", "data.jsonl:3: \"messages\" must be a list of messages, found string"},
      {R"({"messages": [{"content": "a"}]})",
       "data.jsonl:3: messages[0].role is missing; map the message's keys with message_property_mappings: {role: "
       "..., content: ...}"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]})",
       "data.jsonl:3: messages[1].content is missing"},
      {R"({"messages": [{"role": "user", "content": 5}]})",
       "data.jsonl:3: messages[0].content must be a string, found number"},
      {R"({"messages": [{"role": "bot", "content": "a"}]})",
       "data.jsonl:3: messages[0].role: unknown role 'bot' (known: assistant, gpt, human, system, tool, user); map it "
       "with roles: {assistant: [bot]}"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.row);
    expect_error([&] { load_dataset(file(good + "\n\n" + c.row + "\n"), tok_.get(), 4096, false); }, c.fragment);
  }
}

TEST_F(ChatDatasetTest, ATokenizerWithoutATemplateNeedsChatTemplateJinja) {
  const ByteTokenizer bytes;
  expect_error([&] { load_dataset(file("{\"messages\": []}\n"), &bytes, 64, false); },
               "data.jsonl: type chat_template needs a chat template, and the model's tokenizer_config.json has "
               "none; set chat_template: jinja");
  auto d = file(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
                "\n");
  d.chat_template_source = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}";
  d.eot_tokens = {"<|im_end|>"};
  expect_error([&] { load_dataset(d, &bytes, 64, false); }, "eot_tokens: '<|im_end|>' is not a token");
  d.eot_tokens = {};
  const auto samples = load_dataset(d, &bytes, 64, false);
  ASSERT_EQ(samples.size(), 1u);
  // "user: a\nassistant: b\n" in bytes; only "b" is trained (no EOS follows it in this template).
  const std::string text = "user: a\nassistant: b\n";
  EXPECT_EQ(samples[0].input_ids, std::vector<int64_t>(text.begin(), text.end()));
  std::vector<int64_t> labels(text.size(), -100);
  labels[text.find('b')] = 'b';
  EXPECT_EQ(samples[0].labels, labels);
}

// A row's tools reach the template as the file writes them: tojson keeps the key order.
TEST_F(ChatDatasetTest, ToolsKeepTheirKeyOrder) {
  const ByteTokenizer bytes;
  auto d = file(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], )"
                R"("tools": [{"name": "f", "description": "d", "parameters": {"type": "object", "required": []}}]})"
                "\n");
  d.chat_template_source = "{{ tools | tojson }}\n{% for m in messages %}{{ m['content'] }}\n{% endfor %}";
  const auto samples = load_dataset(d, &bytes, 256, false);
  ASSERT_EQ(samples.size(), 1u);
  const std::string text(samples[0].input_ids.begin(), samples[0].input_ids.end());
  EXPECT_EQ(
      text,
      "[{\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"required\": []}}]\na\nb\n");
}

// Completion and alpaca through a tokenizer.json, as axolotl: tokenizer(text) with the family's
// special tokens (a BOS for Llama 3), EOS appended; alpaca's response without special tokens.
TEST_F(ChatDatasetTest, CompletionAndAlpacaUseTheTokenizersSpecialTokens) {
  const auto llama = HfTokenizer::load(fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3");
  const auto bos = *llama.id_of("<|begin_of_text|>");
  const auto eos = llama.eos_id();
  auto completion = load_dataset(file("{\"text\": \"Hello world\"}\n", "completion"), &llama, 4096, false);
  auto ids = llama.tokenize("Hello world", false).ids;
  std::vector<int64_t> expected = {bos};
  expected.insert(expected.end(), ids.begin(), ids.end());
  expected.push_back(eos);
  ASSERT_EQ(completion.size(), 1u);
  EXPECT_EQ(completion[0].input_ids, expected);
  EXPECT_EQ(completion[0].labels, expected);

  const auto alpaca = load_dataset(
      file("{\"instruction\": \"Say hi\", \"output\": \"hi\"}\n", "alpaca"), &llama, 4096, /*train_on_inputs=*/false);
  const auto prompt = llama.tokenize(alpaca_prompt("Say hi", ""), true).ids;
  const auto response = llama.tokenize("hi", false).ids;
  ASSERT_EQ(alpaca.size(), 1u);
  ASSERT_EQ(prompt.front(), bos);
  expected = prompt;
  expected.insert(expected.end(), response.begin(), response.end());
  expected.push_back(eos);
  EXPECT_EQ(alpaca[0].input_ids, expected);
  std::vector<int64_t> labels(prompt.size(), -100);
  labels.insert(labels.end(), response.begin(), response.end());
  labels.push_back(eos);
  EXPECT_EQ(alpaca[0].labels, labels);
}

}  // namespace
}  // namespace qtrain::engine::data
