// Chat templates against transformers: every case of
// scripts/reference/chat_template_reference.py (feature templates, ChatML, templates in the
// style of Llama 3.1 / Gemma / Mistral, a template with {% generation %}, and the official Qwen3
// template) rendered by ChatTemplate must equal what apply_chat_template rendered, byte for
// byte, with the same generation spans; where transformers raised, qtrain must raise too. Cases
// with "named" render qtrain's named template of that name (named_chat_template.h) instead.
#include "engine/text/chat_template.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/text/jinja_error.h"
#include "engine/text/named_chat_template.h"

namespace qtrain::engine::text {
namespace {

using json = nlohmann::ordered_json;

// The cases file the build makes ($QTRAIN_FIXTURES/chat_templates.json), or null (skip).
const json* reference_cases(std::string* why) {
  static json cases;
  static std::string error;
  static bool loaded = false;
  if (!loaded) {
    loaded = true;
    const char* dir = std::getenv("QTRAIN_FIXTURES");
    if (dir == nullptr) {
      error = "QTRAIN_FIXTURES is not set: run through ctest (scripts/test.sh)";
    } else {
      const auto path = std::filesystem::path(dir) / "chat_templates.json";
      std::ifstream in(path);
      if (!in) {
        error = "no " + path.string() + ": build the qtrain_chat_template_fixtures target";
      } else {
        cases = json::parse(in);
      }
    }
  }
  *why = error;
  return error.empty() ? &cases : nullptr;
}

std::tm reference_clock(const json& clock) {
  std::tm tm{};
  tm.tm_year = clock[0].get<int>() - 1900;
  tm.tm_mon = clock[1].get<int>() - 1;
  tm.tm_mday = clock[2].get<int>();
  tm.tm_hour = clock[3].get<int>();
  tm.tm_min = clock[4].get<int>();
  tm.tm_sec = clock[5].get<int>();
  std::mktime(&tm);  // fills in the weekday and day of the year for %A, %j
  return tm;
}

// Where two strings first differ, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) + "\n  want: ..." + json(want.substr(from, 80)).dump() +
         "\n  got:  ..." + json(got.substr(from, 80)).dump();
}

// Renders every case of `group` and compares; returns how many were compared.
int check_group(const std::string& group) {
  std::string why;
  const json* all = reference_cases(&why);
  if (all == nullptr) {
    ADD_FAILURE() << why;
    return 0;
  }
  const std::tm clock = reference_clock(all->at("clock"));
  int compared = 0;
  for (const json& c : all->at("cases")) {
    if (c["group"] != group) continue;
    ++compared;
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    ChatTemplateInput input;
    input.messages = c["messages"];
    input.tools = c["tools"];
    input.add_generation_prompt = c["add_generation_prompt"];
    input.variables = c["variables"];
    try {
      ChatTemplate t(
          c.contains("named") ? named_chat_template(c["named"].get<std::string>()) : c["template"].get<std::string>(),
          name);
      t.set_clock([clock] { return clock; });
      const Rendered r = t.render(input);
      if (!c.contains("text")) {
        ADD_FAILURE() << "transformers failed (" << (c.contains("raised") ? c["raised"] : c["error"])
                      << ") but qtrain rendered " << json(r.text).dump();
        continue;
      }
      const std::string want = c["text"];
      EXPECT_EQ(r.text, want) << first_difference(want, r.text);
      std::vector<std::pair<size_t, size_t>> want_spans;
      for (const auto& s : c["spans"]) want_spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
      EXPECT_EQ(r.generation_spans, want_spans);
    } catch (const TemplateRaised& e) {
      if (c.contains("raised")) {
        EXPECT_EQ(e.template_message(), c["raised"].get<std::string>());
        EXPECT_NE(std::string(e.what()).find(c["raised"].get<std::string>()), std::string::npos) << e.what();
      } else {
        ADD_FAILURE() << "qtrain raised " << e.what() << "\n but transformers gave "
                      << (c.contains("text") ? json(c["text"]).dump() : c["error"].dump());
      }
    } catch (const TemplateError& e) {
      if (!c.contains("error")) {
        ADD_FAILURE() << "qtrain failed: " << e.what() << "\n but transformers gave "
                      << (c.contains("text") ? json(c["text"]).dump() : "raise_exception: " + c["raised"].dump());
      }
    }
  }
  return compared;
}

TEST(ChatTemplateReference, FeatureTemplates) {
  EXPECT_GT(check_group("features"), 50);
}

TEST(ChatTemplateReference, TemplatesJinjaRefusesAreRefused) {
  EXPECT_GT(check_group("compile_errors"), 5);
}

TEST(ChatTemplateReference, ChatML) {
  EXPECT_GT(check_group("chatml"), 10);
}

TEST(ChatTemplateReference, GenerationSpans) {
  EXPECT_GT(check_group("generation"), 10);
}

TEST(ChatTemplateReference, LlamaStyle) {
  EXPECT_GT(check_group("llama_style"), 10);
}

TEST(ChatTemplateReference, GemmaStyle) {
  EXPECT_GT(check_group("gemma_style"), 10);
}

TEST(ChatTemplateReference, MistralStyle) {
  EXPECT_GT(check_group("mistral_style"), 10);
}

// The reference script's note when it could not find the official Qwen3 template, else "".
std::string qwen3_missing() {
  std::string why;
  if (const json* all = reference_cases(&why)) {
    for (const auto& m : all->at("missing")) {
      if (m.get<std::string>().rfind("qwen3", 0) == 0) return m.get<std::string>();
    }
  }
  return "";
}

TEST(ChatTemplateReference, Qwen3Official) {
  if (const std::string m = qwen3_missing(); !m.empty()) GTEST_SKIP() << "the Qwen3 template is not installed: " << m;
  EXPECT_GT(check_group("qwen3"), 10);
}

// Every named template on plain conversations against its family's format, written out by hand
// in the reference script (family_rendering).
TEST(ChatTemplateReference, NamedTemplatesWriteTheirFamilysFormat) {
  EXPECT_GT(check_group("named_family"), 40);
}

// qtrain's qwen3 (axolotl's qwen3) against the official Qwen3 template, wherever that renders:
// the same text, but for the "<think>\n\n" axolotl's generation prompt opens.
TEST(ChatTemplateReference, NamedQwen3MatchesTheOfficialTemplate) {
  if (const std::string m = qwen3_missing(); !m.empty()) GTEST_SKIP() << "the Qwen3 template is not installed: " << m;
  EXPECT_GT(check_group("named_qwen3_official"), 50);
}

// Templates given to the reference script through $QTRAIN_EXTRA_CHAT_TEMPLATES (ad-hoc checks
// of third-party templates that are not committed); skipped when there are none.
TEST(ChatTemplateReference, ExtraTemplates) {
  std::string why;
  const json* all = reference_cases(&why);
  bool any = false;
  if (all != nullptr) {
    for (const auto& c : all->at("cases")) any = any || c["group"] == "extra";
  }
  if (!any) GTEST_SKIP() << "no extra templates (set QTRAIN_EXTRA_CHAT_TEMPLATES when making the cases)";
  EXPECT_GT(check_group("extra"), 0);
  check_group("extra_named");  // qtrain's named templates against the same-named extra files
}

TEST(NamedChatTemplate, ListsTheNamesAndRefusesOthers) {
  const auto names = named_chat_template_names();
  for (const char* n : {"chatml",
                        "gemma",
                        "gemma3",
                        "gemma4",
                        "llama3",
                        "mistral_v1",
                        "mistral_v2v3",
                        "mistral_v3_tekken",
                        "mistral_v7_tekken",
                        "qwen3",
                        "qwen_25"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    EXPECT_NO_THROW(ChatTemplate(named_chat_template(n), n));
  }
  EXPECT_FALSE(find_named_chat_template("chatml2").has_value());
  try {
    named_chat_template("chatml2");
    FAIL() << "expected TemplateError";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("'chatml2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chatml, gemma, gemma3, gemma4, llama3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chat_template: jinja"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, RendersMessagesToolsAndVariables) {
  ChatTemplate t(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if tools %}[{{ tools | length }} tools]{% endif %}{% if add_generation_prompt %}<assistant>{% endif %}",
      "test");
  ChatTemplateInput in;
  in.messages = json::parse(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])");
  in.variables = {{"bos_token", "<s>"}};
  EXPECT_EQ(t.render(in).text, "<s><user>hi<assistant>yo");
  in.add_generation_prompt = true;
  in.tools = json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(t.render(in).text, "<s><user>hi<assistant>yo[1 tools]<assistant>");
}

TEST(ChatTemplate, AliasesReasoningLikeTransformers) {
  ChatTemplate t("{% for m in messages %}{{ m | tojson }}{% endfor %}", "alias");
  ChatTemplateInput in;
  in.messages = json::parse(R"([{"role": "assistant", "content": "x", "reasoning": "r"}])");
  EXPECT_EQ(t.render(in).text,
            R"({"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"})");
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  ChatTemplate t(
      "{% if messages[0].role != 'user' %}{{ raise_exception('First message must be from the user') }}{% endif %}",
      "strict");
  ChatTemplateInput in;
  in.messages = json::parse(R"([{"role": "assistant", "content": "x"}])");
  try {
    t.render(in);
    FAIL() << "expected TemplateRaised";
  } catch (const TemplateRaised& e) {
    EXPECT_EQ(e.template_message(), "First message must be from the user");
    EXPECT_NE(std::string(e.what()).find("'strict'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("First message must be from the user"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, RejectsMessagesThatAreNotObjects) {
  ChatTemplate t("{{ messages }}", "t");
  ChatTemplateInput in;
  in.messages = json::parse(R"(["hello"])");
  EXPECT_THROW(t.render(in), TemplateError);
}

TEST(ChatTemplate, FromTokenizerConfig) {
  EXPECT_EQ(chat_template_from_tokenizer_config(json{{"chat_template", "X"}}), "X");
  const json named = json::parse(R"({"chat_template": [{"name": "default", "template": "D"},
                                                        {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(chat_template_from_tokenizer_config(named, "tool_use"), "T");
  try {
    chat_template_from_tokenizer_config(named, "rag");
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("default, tool_use"), std::string::npos) << e.what();
  }
  EXPECT_THROW(chat_template_from_tokenizer_config(json::object()), TemplateError);
}

}  // namespace
}  // namespace qtrain::engine::text
