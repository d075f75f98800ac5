// Tests for engine/data/chat_dataset (type chat_template) and the Hugging Face tokenizer path of
// completion, alpaca and input_output: input_ids and labels equal those
// scripts/reference/chat_data_reference.py makes with transformers (apply_chat_template + offsets)
// for every roles_to_train, train_on_eos and train_on_eot setting and for axolotl's message
// features (training flags and details, content parts, the row's system, extra message keys,
// drop_system_message, train_on_inputs); key mappings; bad rows name file:line, field and fix;
// samples without a trained token are dropped and counted.
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
#include "engine/io/remove_tree.h"
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
    if (!dir_.empty()) qtrain::engine::io::remove_tree(dir_);
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
      EXPECT_EQ(stats.dropped_untrained, static_cast<int64_t>(4 - expected.size()));
      ASSERT_EQ(samples.size(), expected.size());
      for (size_t i = 0; i < samples.size(); ++i) {
        EXPECT_EQ(samples[i].input_ids, expected[i].input_ids) << "sample " << i;
        EXPECT_EQ(samples[i].labels, expected[i].labels) << "sample " << i;
      }
    }
  }
}

// A template that writes a message's name, reasoning_content and tool_calls, and ends a turn with
// <|endoftext|> (the eot token here) before the EOS <|im_end|>, so that the two are trained apart.
constexpr const char* kFeatureTemplate =
    "{% if tools %}tools: {{ tools | tojson }}{{ '\\n' }}{% endif %}{% for message in messages %}<|im_start|>{{ "
    "message['role'] }}{% if message.name is defined %} ({{ message.name }}){% endif %}{{ '\\n' }}{% if "
    "message.reasoning_content is defined %}<think>{{ message.reasoning_content }}</think>{{ '\\n' }}{% endif %}{{ "
    "message['content'] }}{% if message.tool_calls is defined %}{% for call in message.tool_calls %}<tool_call>{{ "
    "call.function | tojson }}</tool_call>{% endfor %}{% endif %}<|endoftext|><|im_end|>{{ '\\n' }}{% endfor %}";

// The row's system (prepended, or not when the first message is one), training flags, a
// training detail, content parts with and without train flags, null keys (removed), a name,
// reasoning_content, tool_calls with string arguments and a tool turn, and a row whose every turn
// is marked untrained.
constexpr const char* kFeatureRows =
    R"({"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there", "training": false}, {"role": "user", "content": "Again"}, {"role": "assistant", "content": "Hello again"}]})"
    "\n"
    R"({"messages": [{"role": "user", "content": "Teach me", "training": true}, {"role": "assistant", "content": "First part, second part", "train_detail": [{"begin_offset": 0, "end_offset": 4, "train": true}, {"begin_offset": 5, "end_offset": 22, "train": false}]}]})"
    "\n"
    R"({"messages": [{"role": "user", "content": "Think", "name": "ann"}, {"role": "assistant", "content": [{"type": "text", "text": "Keep this", "train": true}, {"type": "text", "text": " but not this", "train": false}], "reasoning_content": "café first", "name": null}]})"
    "\n"
    R"({"tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}], "messages": [{"role": "user", "content": "1+2?"}, {"role": "assistant", "content": "Calling add", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]}, {"role": "tool", "content": "3"}, {"role": "assistant", "content": "It is 3"}]})"
    "\n"
    R"({"system": "unused", "messages": [{"role": "system", "content": "Own system"}, {"role": "user", "content": "Go"}, {"role": "assistant", "content": [{"type": "text", "text": "Plain "}, {"type": "text", "text": "parts"}]}]})"
    "\n"
    R"({"messages": [{"role": "user", "content": "Skip"}, {"role": "assistant", "content": "me", "training": false}]})"
    "\n";

TEST_F(ChatDatasetTest, MessageFeaturesEqualTheTransformersReference) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (!python || !*python) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const auto data = file(kFeatureRows).path;
  std::ofstream(dir_ / "features.jinja") << kFeatureTemplate;
  // ROLES:EOS:EOT
  const std::vector<std::string> cases = {
      "assistant:turn", "assistant:turn:none", "assistant:none:turn", "assistant:last:all", "user,assistant:all:last"};
  struct Run {
    std::string flags;
    bool drop_system_message;
    bool train_on_inputs;
  };
  for (const auto& run :
       {Run{"", false, false}, Run{" --drop-system-message", true, false}, Run{" --train-on-inputs", false, true}}) {
    SCOPED_TRACE("flags:" + run.flags);
    const auto out = dir_ / "reference.json";
    std::string cmd = std::string(python) + " " + QTRAIN_SOURCE_DIR +
                      "/scripts/reference/chat_data_reference.py --tokenizer " + tokenizer_dir_.string() + " --data " +
                      data.string() + " --out " + out.string() + " --chat-template " +
                      (dir_ / "features.jinja").string() +
                      " --eot-tokens '<|endoftext|>' --message-field-training training "
                      "--message-field-training-detail train_detail" +
                      run.flags + " --cases";
    for (const auto& c : cases) cmd += " " + c;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto reference = nlohmann::json::parse(std::ifstream(out));
    for (const auto& c : cases) {
      SCOPED_TRACE("case " + c);
      const auto roles = c.substr(0, c.find(':'));
      const auto settings = c.substr(c.find(':') + 1);
      config::DatasetConfig d;
      d.path = data;
      d.type = "chat_template";
      d.chat_template_source = kFeatureTemplate;
      d.eot_tokens = {"<|endoftext|>"};
      d.message_field_training = "training";
      d.message_field_training_detail = "train_detail";
      d.drop_system_message = run.drop_system_message;
      d.roles_to_train.clear();
      for (size_t p = 0; p != std::string::npos;) {
        const auto q = roles.find(',', p);
        d.roles_to_train.push_back(roles.substr(p, q == std::string::npos ? q : q - p));
        p = q == std::string::npos ? q : q + 1;
      }
      d.train_on_eos = settings.substr(0, settings.find(':'));
      d.train_on_eot = settings.find(':') == std::string::npos ? "" : settings.substr(settings.find(':') + 1);
      std::vector<Sample> expected;
      for (const auto& j : reference.at(c)) {
        Sample s{j.at("input_ids").get<std::vector<int64_t>>(), j.at("labels").get<std::vector<int64_t>>()};
        if (std::any_of(s.labels.begin() + 1, s.labels.end(), [](int64_t l) { return l != -100; })) {
          expected.push_back(std::move(s));
        }
      }
      DatasetStats stats;
      const auto samples = load_dataset(d, tok_.get(), 4096, run.train_on_inputs, &stats);
      EXPECT_EQ(stats.rows, 6);
      ASSERT_EQ(samples.size(), expected.size());
      for (size_t i = 0; i < samples.size(); ++i) {
        EXPECT_EQ(samples[i].input_ids, expected[i].input_ids) << "sample " << i;
        EXPECT_EQ(samples[i].labels, expected[i].labels) << "sample " << i;
      }
    }
  }
}

// The features by hand, so that a rule the reference shares with qtrain is also checked against
// its meaning: a training detail trains exactly the tokens of its range, content parts are one
// string, the row's system is the first turn.
TEST_F(ChatDatasetTest, TrainingDetailAndContentPartsTrainTheirRanges) {
  const auto trained = [](const Sample& s) {
    std::vector<int64_t> out;
    for (const auto l : s.labels) {
      if (l != -100) out.push_back(l);
    }
    return out;
  };
  auto d = file(
      R"({"system": "S", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes no", "detail": [{"begin_offset": 0, "end_offset": 2, "train": true}, {"begin_offset": 3, "end_offset": 5, "train": false}]}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "text", "text": "Yes"}, {"type": "text", "text": " no", "train": false}]}]})"
      "\n");
  d.message_field_training_detail = "detail";
  const auto samples = load_dataset(d, tok_.get(), 4096, false);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(
      samples[0].input_ids,
      tok_->tokenize("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYes "
                     "no<|im_end|>\n",
                     false)
          .ids);
  auto expected = tok_->tokenize("Yes", false).ids;
  ASSERT_EQ(tok_->tokenize("Yes no", false).ids.size(), expected.size() + 1) << "\"Yes\" and \" no\" are tokens";
  expected.push_back(*tok_->id_of("<|im_end|>"));
  EXPECT_EQ(trained(samples[0]), expected);
  EXPECT_EQ(trained(samples[1]), expected);
}

TEST_F(ChatDatasetTest, BadFeatureValuesNameTheRowFieldAndFix) {
  const std::string good = R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  struct Case {
    std::string row;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {R"({"messages": [{"role": "assistant", "content": "abc", "training": "yes"}]})",
       "data.jsonl:3: messages[0].training must be true or false (message_field_training), found \"yes\""},
      {R"({"messages": [{"role": "assistant", "content": "abc", "detail": [{"begin_offset": 1, "end_offset": 3, "train": true}]}]})",
       "data.jsonl:3: messages[0].detail[0]: offsets 1..3 are not within the content's 3 characters; use 0 <= "
       "begin_offset <= end_offset < 3"},
      {R"({"messages": [{"role": "assistant", "content": "abc", "detail": [{"begin_offset": 0}]}]})",
       "data.jsonl:3: messages[0].detail[0] must be a list of {\"begin_offset\": 0, \"end_offset\": 9, \"train\": "
       "true}"},
      {R"({"messages": [{"role": "assistant", "content": "b", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}]})",
       "data.jsonl:3: messages[0].tool_calls[0].function.arguments is a string that is not JSON"},
      {R"({"system": 5, "messages": [{"role": "user", "content": "a"}]})",
       "data.jsonl:3: \"system\" (the system message) must be a string, found number"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.row);
    auto d = file(good + "\n\n" + c.row + "\n");
    d.message_field_training = "training";
    d.message_field_training_detail = "detail";
    expect_error([&] { load_dataset(d, tok_.get(), 4096, false); }, c.fragment);
  }
  auto d = file(good + "\n");
  d.train_on_eot = "all";
  expect_error([&] { load_dataset(d, tok_.get(), 4096, false); },
               "data.jsonl: train_on_eos is turn and train_on_eot is all, but the eos_token '<|im_end|>' is one of "
               "the eot_tokens, so it would be both; set them equal");
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
  EXPECT_EQ(stats.dropped_untrained, 1);
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
      {R"({"messages": "hi"})", "data.jsonl:3: \"messages\" is a string that is not JSON ("},
      {R"({"messages": "{\"role\": \"user\"}"})",
       "data.jsonl:3: \"messages\" must be a list of messages, found object"},
      {R"({"messages": [{"content": "a"}]})",
       "data.jsonl:3: messages[0].role is missing; map the message's keys with message_property_mappings: {role: "
       "..., content: ...}"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]})",
       "data.jsonl:3: messages[1].content is missing"},
      {R"({"messages": [{"role": "user", "content": 5}]})",
       "data.jsonl:3: messages[0].content must be a string or a list of parts, found number"},
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
               "none; set chat_template to a named template (chatml, llama3, ...) or to jinja");
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

// tokenizer_default_fallback_<name>: the tokenizer's own template when it has one, else <name>.
TEST_F(ChatDatasetTest, TheFallbackTemplateServesOnlyATokenizerWithoutOne) {
  const ByteTokenizer bytes;  // has no template
  auto d = file(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
                "\n");
  d.chat_template_fallback = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}";
  const auto fallback = load_dataset(d, &bytes, 64, false);
  ASSERT_EQ(fallback.size(), 1u);
  const std::string text = "user: a\nassistant: b\n";
  EXPECT_EQ(fallback[0].input_ids, std::vector<int64_t>(text.begin(), text.end()));
  // The Qwen3 stand-in has its ChatML template, which wins over the fallback.
  const auto own = load_dataset(d, tok_.get(), 4096, false);
  d.chat_template_fallback.clear();
  const auto without = load_dataset(d, tok_.get(), 4096, false);
  ASSERT_EQ(own.size(), 1u);
  ASSERT_EQ(without.size(), 1u);
  EXPECT_EQ(own[0].input_ids, without[0].input_ids);
  EXPECT_NE(own[0].input_ids, fallback[0].input_ids);
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

// message_property_mappings beyond role and content: the mapped key reaches the template under
// the template's name and not under its own; an unmapped key under its own name.
TEST_F(ChatDatasetTest, MappedMessagePropertiesReachTheTemplateUnderTheirNames) {
  const ByteTokenizer bytes;
  auto d = file(R"({"messages": [{"role": "user", "content": "a", "speaker": "bob", "mood": "glad"}, )"
                R"({"role": "assistant", "content": "b", "speaker": "eve"}]})"
                "\n");
  d.chat_template_source =
      "{% for m in messages %}{{ m.name }}|{{ m.speaker }}|{{ m.mood }}: {{ m['content'] }}\n{% endfor %}";
  d.message_properties = {{"name", "speaker"}};
  const auto samples = load_dataset(d, &bytes, 256, false);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(std::string(samples[0].input_ids.begin(), samples[0].input_ids.end()), "bob||glad: a\neve||: b\n");
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

// input_output through the Llama 3 tokenizer, whose add_special_tokens writes a BOS: axolotl adds
// none, so the row's own <|begin_of_text|> is the only one.
TEST_F(ChatDatasetTest, InputOutputEqualsTheTransformersReference) {
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (!python || !*python) GTEST_SKIP() << "QTRAIN_PYTHON is not set";
  const fs::path llama_dir = fs::path(std::getenv("QTRAIN_FIXTURES")) / "tokenizers" / "llama3";
  const auto llama = HfTokenizer::load(llama_dir);
  const auto d = file(
      R"({"segments": [{"label": false, "text": "<|begin_of_text|>Question: café?\n"}, {"label": true, "text": "Answer: yes<|eot_id|>"}]})"
      "\n"
      R"({"segments": [{"label": true, "text": "one"}, {"label": false, "text": " two "}, {"label": true, "text": "three"}, {"label": false, "text": ""}]})"
      "\n",
      "input_output");
  for (const bool train_on_inputs : {false, true}) {
    SCOPED_TRACE(train_on_inputs ? "train_on_inputs" : "labels");
    const auto out = dir_ / "reference.jsonl";
    const std::string cmd = std::string(python) + " " + QTRAIN_SOURCE_DIR +
                            "/scripts/reference/input_output_reference.py --tokenizer " + llama_dir.string() +
                            " --data " + d.path.string() + " --out " + out.string() +
                            (train_on_inputs ? " --train-on-inputs" : "");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(out);
    std::vector<Sample> expected;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      expected.push_back({j.at("input_ids").get<std::vector<int64_t>>(), j.at("labels").get<std::vector<int64_t>>()});
    }
    const auto samples = load_dataset(d, &llama, 4096, train_on_inputs);
    ASSERT_EQ(samples.size(), expected.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(samples[i].input_ids, expected[i].input_ids) << "sample " << i;
      EXPECT_EQ(samples[i].labels, expected[i].labels) << "sample " << i;
    }
    EXPECT_EQ(std::count(samples[0].input_ids.begin(), samples[0].input_ids.end(), *llama.id_of("<|begin_of_text|>")),
              1);
  }
}

}  // namespace
}  // namespace qtrain::engine::data
