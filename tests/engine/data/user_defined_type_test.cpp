// Note [User-defined type]: axolotl's `type:` map turns a row into TRL's text row through Python
// format strings; the expected texts are Python's str.format results, written out.
#include "engine/data/user_defined_type.h"

#include <gtest/gtest.h>

#include <fstream>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

using json = nlohmann::ordered_json;

TEST(UserDefinedType, DefaultsPassTrlsFieldsThrough) {
  const json row = {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}, {"system", "S"}, {"other", 1}};
  EXPECT_EQ(user_defined_row({}, row, false, "d.jsonl:1"), (json{{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}))
      << "the default prompt format has no {system}, so the system text is not used";
  const json kto = {{"prompt", "P"}, {"completion", "C"}, {"label", false}};
  EXPECT_EQ(user_defined_row({}, kto, true, "d.jsonl:1"),
            (json{{"prompt", "P"}, {"completion", "C"}, {"label", false}}));
}

TEST(UserDefinedType, FormatsFillTheNamedFieldsAsPythonsStrFormat) {
  config::UserDefinedType u;
  u.field_prompt = "instruction";
  u.field_system = "sys";
  u.field_chosen = "chosen_response";
  u.field_rejected = "rejected_response";
  u.prompt_format = "<<SYS>>{system}<</SYS>>\n[INST] {prompt} [/INST]";
  u.chosen_format = "{chosen}</s>";
  u.rejected_format = "{{\"answer\": \"{rejected}\"}}";
  const json row = {
      {"instruction", "Add 2+2"}, {"sys", "Be brief."}, {"chosen_response", "4"}, {"rejected_response", "5"}};
  EXPECT_EQ(user_defined_row(u, row, false, "d.jsonl:1"),
            (json{{"prompt", "<<SYS>>Be brief.<</SYS>>\n[INST] Add 2+2 [/INST]"},
                  {"chosen", "4</s>"},
                  {"rejected", "{\"answer\": \"5\"}"}}));
  // The prompt's placeholder may repeat; a format without {system} leaves the system out.
  u.prompt_format = "{prompt} / {prompt}";
  EXPECT_EQ(user_defined_row(u, row, false, "d.jsonl:1")["prompt"], "Add 2+2 / Add 2+2");
  // KTO's completion and label under their own keys.
  config::UserDefinedType k;
  k.field_completion = "answer";
  k.field_label = "good";
  k.completion_format = "> {completion}";
  EXPECT_EQ(user_defined_row(k, {{"prompt", "P"}, {"answer", "A"}, {"good", true}}, true, "d.jsonl:1"),
            (json{{"prompt", "P"}, {"completion", "> A"}, {"label", true}}));
}

TEST(UserDefinedType, RowsAndFormatsThatCannotFillAreRefusedWithThePlace) {
  config::UserDefinedType u;
  u.prompt_format = "{system}: {prompt}";
  test::expect_error(
      [&] {
        user_defined_row(u, {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "d.jsonl:3: prompt_format \"{system}: {prompt}\" names {system}, and the row's \"system\" (field_system) "
      "is absent, empty or not text; give every row a system text, or write the format without {system}");
  u.prompt_format = "{instruction}";
  test::expect_error(
      [&] {
        user_defined_row(u, {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "prompt_format \"{instruction}\" names {instruction}; it fills {prompt}, {system}, so write the format "
      "with those");
  u.prompt_format = "{prompt!r}";
  test::expect_error(
      [&] {
        user_defined_row(u, {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "has {prompt!r}: conversions, format specs, indexing and attributes are not supported");
  config::UserDefinedType c;
  c.chosen_format = "{prompt} {chosen}";
  test::expect_error(
      [&] {
        user_defined_row(c, {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "chosen_format \"{prompt} {chosen}\" names {prompt}; it fills {chosen}, so write the format with those");
  u.prompt_format = "a } b {prompt}";
  test::expect_error(
      [&] {
        user_defined_row(u, {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "has a single '}' (write }} for a brace)");
  u.prompt_format = "{prompt";
  test::expect_error(
      [&] {
        user_defined_row(u, {{"prompt", "P"}, {"chosen", "C"}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "has a '{' without its '}'");
  test::expect_error(
      [&] {
        user_defined_row({}, {{"prompt", "P"}, {"chosen", 3}, {"rejected", "R"}}, false, "d.jsonl:3");
      },
      "d.jsonl:3: the user-defined type reads the text of \"chosen\" (field_chosen), and the row holds a "
      "number there; set field_chosen to the row's key of that text");
  test::expect_error(
      [&] {
        user_defined_row({}, {{"prompt", "P"}, {"completion", "C"}}, true, "d.jsonl:3");
      },
      "d.jsonl:3: the row has no \"label\" (field_label), KTO's label");
}

TEST(UserDefinedType, TheConfigReadsTypeAsAMapAndWritesItBack) {
  const auto dir = test::fresh_test_dir(true);
  std::ofstream(dir / "p.jsonl") << "{}\n";
  const std::string head = "base_model: m\nlora_target_linear: true\nrl: dpo\ndatasets:\n  - path: p.jsonl\n    type: ";
  const auto c = config::parse_run_config(
      head + "{field_prompt: instruction, field_system: null, prompt_format: \"[INST] {prompt} [/INST]\"}\n",
      "run.yaml",
      dir);
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].type, "user_defined.default");
  EXPECT_EQ(c.datasets[0].user_defined.field_prompt, "instruction");
  EXPECT_EQ(c.datasets[0].user_defined.field_system, "system") << "null is the default, as axolotl's .get gives it";
  EXPECT_EQ(c.datasets[0].user_defined.prompt_format, "[INST] {prompt} [/INST]");
  const auto saved = config::to_yaml(c);
  EXPECT_EQ(config::parse_run_config(saved, "saved.yaml", dir), c) << saved;
  test::expect_error([&] { config::parse_run_config(head + "{field_promt: q}\n", "run.yaml", dir); },
                     "run.yaml:6:12: datasets[0].type.field_promt: not a key of axolotl's user-defined preference type "
                     "(field_prompt, ");
  test::expect_error([&] { config::parse_run_config(head + "{field_promt: q}\n", "run.yaml", dir); },
                     "; did you mean 'field_prompt'?");
  test::expect_error([&] { config::parse_run_config(head + "user_defined.default\n", "run.yaml", dir); },
                     "axolotl's user-defined type is written as a map of its keys");
  test::expect_error([&] { config::parse_run_config(head + "{field_prompt: [a]}\n", "run.yaml", dir); },
                     "datasets[0].type.field_prompt: expected the row key that holds the text, got");
  io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::data
