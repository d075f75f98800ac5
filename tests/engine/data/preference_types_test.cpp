// Note [Preference types]: axolotl's preference dataset types write TRL's text rows as axolotl's
// prompt_strategies/dpo/{chatml,llama3,chat_template}.py (and, for KTO, prompt_strategies/kto)
// write them (the expected texts below are their f-strings and renderings, written out), and the
// config reads their keys.
#include "engine/data/preference_types.h"

#include <gtest/gtest.h>

#include <fstream>

#include "engine/config/run_config.h"
#include "engine/io/remove_tree.h"
#include "engine/text/named_chat_template.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

using json = nlohmann::ordered_json;

json row_of(const std::string& type, const json& row, const text::ChatTemplate* t = nullptr) {
  config::DatasetConfig d;
  d.type = type;
  return preference_type_row(d, row, t, "<s>", "</s>", "p.jsonl:1");
}

json kto_row_of(const std::string& type, const json& row) {
  config::DatasetConfig d;
  d.type = type;
  return kto_type_row(d, row, "k.jsonl:1");
}

// With rl: kto, axolotl's prompt_strategies/kto/{chatml,llama3}.py: KTO's text rows.
TEST(PreferenceTypes, KtosChatmlAndLlama3TypesWriteKtoRows) {
  const json ultra = {{"system", "Be brief."}, {"prompt", "2+2?"}, {"completion", "4"}, {"label", true}};
  EXPECT_EQ(
      kto_row_of("chatml.ultra", ultra),
      (json{{"prompt",
             "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
            {"completion", "4<|im_end|>"},
            {"label", true}}));
  EXPECT_EQ(
      kto_row_of("llama3.argilla", {{"instruction", "Hi"}, {"completion", "Yo"}, {"label", false}}),
      (json{{"prompt",
             "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
             "\n\n"},
            {"completion", "Yo<|eot_id|>"},
            {"label", false}}));
  EXPECT_EQ(kto_row_of("chatml.intel", {{"question", "Q"}, {"completion", "A"}, {"label", true}})["prompt"],
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  // argilla_chat: the conversation in "completion"; llama3 writes every turn before the last.
  const json chat = {{"completion",
                      {{{"role", "user"}, {"content", "Q"}},
                       {{"role", "assistant"}, {"content", "A"}},
                       {{"role", "user"}, {"content", "Q2"}},
                       {{"role", "assistant"}, {"content", "A2"}}}},
                     {"label", true}};
  EXPECT_EQ(
      kto_row_of("llama3.argilla_chat", chat),
      (json{{"prompt",
             "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
             "\n\nA<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ2<|eot_id|><|start_header_id|>"
             "assistant<|end_header_id|>\n\n"},
            {"completion", "A2<|eot_id|>"},
            {"label", true}}));
  EXPECT_EQ(kto_row_of("chatml.argilla_chat", chat)["prompt"],
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(kto_row_of("chatml.argilla_chat", chat)["completion"], "A<|im_end|>");  // axolotl's [1]
  test::expect_error([&] { kto_row_of("chatml.icr", ultra); }, "k.jsonl:1: rl: kto reads axolotl's KTO types");
  EXPECT_FALSE(kto_row_of("chatml.ultra", {{"prompt", "Q"}, {"completion", "A"}}).contains("label"))
      << "reading the row names a missing label";
  test::expect_error([&] { row_of("llama3.argilla", ultra); }, "llama3.argilla is one of axolotl's KTO types");
}

TEST(PreferenceTypes, ChatmlAndLlama3WriteTheirMarkup) {
  const json intel = {{"system", "Be brief."}, {"question", "2+2?"}, {"chosen", "4"}, {"rejected", "5"}};
  EXPECT_EQ(
      row_of("chatml.intel", intel),
      (json{{"prompt",
             "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
            {"chosen", "4<|im_end|>"},
            {"rejected", "5<|im_end|>"}}));
  // An empty system writes no system turn (Python's truthiness).
  json no_system = intel;
  no_system["system"] = "";
  EXPECT_EQ(row_of("chatml.intel", no_system)["prompt"], "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(row_of("llama3.intel", intel)["prompt"],
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(row_of("llama3.intel", intel)["chosen"], "4<|eot_id|>");
  // argilla / default: the first of prompt, input, question, instruction; *_response completions.
  const json argilla = {{"instruction", "Name a color."}, {"chosen_response", "Blue"}, {"rejected_response", "Dog"}};
  EXPECT_EQ(row_of("chatml.argilla", argilla),
            (json{{"prompt", "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n"},
                  {"chosen", "Blue<|im_end|>"},
                  {"rejected", "Dog<|im_end|>"}}));
  EXPECT_EQ(row_of("llama3.default", argilla)["rejected"], "Dog<|eot_id|>");
  // icr reads input; prompt_pairs prompt.
  EXPECT_EQ(row_of("chatml.icr", {{"input", "Hi"}, {"chosen", "a"}, {"rejected", "b"}})["prompt"],
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      row_of("llama3.prompt_pairs", {{"prompt", "Hi"}, {"chosen", "a"}, {"rejected", "b"}})["prompt"],
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // ultra and argilla_chat read messages' contents; argilla_chat writes no system turn.
  const json chat = {{"system", "S"},
                     {"prompt", "Q"},
                     {"chosen", {{{"role", "user"}, {"content", "Q"}}, {{"role", "assistant"}, {"content", "good"}}}},
                     {"rejected", {{{"role", "user"}, {"content", "Q"}}, {{"role", "assistant"}, {"content", "bad"}}}}};
  EXPECT_EQ(row_of("chatml.ultra", chat),
            (json{{"prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"},
                  {"chosen", "good<|im_end|>"},
                  {"rejected", "bad<|im_end|>"}}));
  EXPECT_EQ(row_of("llama3.argilla_chat", chat)["prompt"],
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  test::expect_error(
      [&] {
        row_of("chatml.intel", {{"chosen", "4"}, {"rejected", "5"}});
      },
      "p.jsonl:1: this dataset's type reads the text of \"question\", and the row has no such field");
}

TEST(PreferenceTypes, ChatTemplateTypesRenderThroughTheTemplate) {
  const text::ChatTemplate chatml(text::named_chat_template("chatml"));
  config::DatasetConfig d;
  d.type = "chat_template.default";
  d.field_messages = "conversation";
  d.message_role = "from";
  d.message_content = "value";
  d.field_chosen = "good";
  d.field_rejected = "bad";
  const json row = {{"conversation", {{{"from", "system"}, {"value", "S"}}, {{"from", "human"}, {"value", "Q?"}}}},
                    {"good", "Yes."},
                    {"bad", {{{"from", "human"}, {"value", "Q?"}}, {{"from", "gpt"}, {"value", "No."}}}}};
  // The prompt with the generation prompt; each completion rendered after a dummy user turn, cut
  // where its content starts and right-stripped.
  EXPECT_EQ(
      preference_type_row(d, row, &chatml, "<s>", "</s>", "p.jsonl:1"),
      (json{{"prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"},
            {"chosen", "Yes.<|im_end|>"},
            {"rejected", "No.<|im_end|>"}}));
  // A text in field_messages is one user message.
  json text_row = row;
  text_row["conversation"] = "Q?";
  EXPECT_EQ(preference_type_row(d, text_row, &chatml, "<s>", "</s>", "p.jsonl:1")["prompt"],
            "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n");
  // argilla_chat: the prompt is field_chosen but its last message.
  config::DatasetConfig a;
  a.type = "chat_template.argilla_chat";
  const json argilla = {
      {"chosen", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello"}}}},
      {"rejected", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Go"}}}}};
  EXPECT_EQ(preference_type_row(a, argilla, &chatml, "<s>", "</s>", "p.jsonl:1"),
            (json{{"prompt", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
                  {"chosen", "Hello<|im_end|>"},
                  {"rejected", "Go<|im_end|>"}}));
  test::expect_error([&] { preference_type_row(a, argilla, nullptr, "<s>", "</s>", "p.jsonl:1"); },
                     "p.jsonl:1: type chat_template.argilla_chat needs a chat template");
}

TEST(PreferenceTypes, TheConfigReadsTheirKeysOnlyWhereTheyApply) {
  const auto dir = test::fresh_test_dir(true);
  std::ofstream(dir / "p.jsonl") << "{}\n";
  const auto c = config::parse_run_config(
      "base_model: m\nlora_target_linear: true\nrl: dpo\nchat_template: chatml\ndatasets:\n  - path: p.jsonl\n    "
      "type: chat_template.default\n"
      "    field_messages: conversation\n    field_chosen: good\n    message_property_mappings: {role: from, content: "
      "value}\n",
      "run.yaml",
      dir);
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].type, "chat_template.default");
  EXPECT_EQ(c.datasets[0].field_chosen, "good");
  EXPECT_EQ(c.datasets[0].field_rejected, "rejected");
  EXPECT_EQ(c.datasets[0].message_role, "from");
  test::expect_error(
      [&] {
        config::parse_run_config(
            "base_model: m\nlora_target_linear: true\nrl: dpo\ndatasets:\n  - path: p.jsonl\n    type: chatml.intel\n"
            "    field_chosen: good\n",
            "run.yaml",
            dir);
      },
      "field_chosen applies only to types chat_template.default and chat_template.argilla_chat");
  test::expect_error(
      [&] {
        config::parse_run_config(
            "base_model: m\nlora_target_linear: true\ndatasets:\n  - path: p.jsonl\n    type: chatml.bogus\n",
            "run.yaml",
            dir);
      },
      "one of axolotl's preference types");
  io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::data
