// One Tokenizer and one ChatTemplate shared by many threads (as the dataset formats share them,
// engine/data/row_map.h) give what HF gives: every thread encodes the whole tokenizer corpus of
// tokenizer_reference.py in its own order on a fresh instance (cold BPE cache, so threads race to
// fill it) and renders every chat template case of chat_template_reference.py, and each result must
// equal the reference's ids, offsets and text. Run under -fsanitize=thread, this is the race check.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/text/chat_template.h"
#include "engine/text/jinja_error.h"
#include "engine/text/named_chat_template.h"
#include "engine/text/tokenizer.h"

namespace qtrain::engine::text {
namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 3;

// $QTRAIN_FIXTURES/`name` as JSON, or null when the fixtures are not there.
std::unique_ptr<nlohmann::ordered_json> fixture(const std::string& name) {
  const char* dir = std::getenv("QTRAIN_FIXTURES");
  if (dir == nullptr) return nullptr;
  std::ifstream in(std::filesystem::path(dir) / name);
  if (!in) return nullptr;
  return std::make_unique<nlohmann::ordered_json>(nlohmann::ordered_json::parse(in));
}

// Runs `body(thread)` on kThreads threads at once.
template <typename F>
void on_threads(F body) {
  std::vector<std::jthread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
}

TEST(TextConcurrency, OneTokenizerEncodesOnManyThreadsAsHfDoes) {
  const auto ref = fixture("tokenizers/cases.json");
  if (!ref) GTEST_SKIP() << "no tokenizers/cases.json: build the qtrain_text_fixtures target, run through ctest";
  int families = 0;
  for (const auto& family : ref->at("tokenizers")) {
    const std::string name = family["name"];
    SCOPED_TRACE(name);
    const auto tokenizer = Tokenizer::load(family["dir"].get<std::string>());
    const auto& cases = family["cases"];
    const size_t n = cases.size();
    std::atomic<int64_t> wrong{0}, checked{0};
    std::atomic<size_t> first_wrong{n};
    on_threads([&](int t) {
      for (int round = 0; round < kRounds; ++round) {
        // Each thread starts elsewhere in the corpus and walks it with its own stride.
        for (size_t k = 0; k < n; ++k) {
          const size_t i = (k * (2 * t + 1) + static_cast<size_t>(t) * n / kThreads) % n;
          const auto& c = cases[i];
          const bool special = (i + round) % 2 == 0;
          const auto e = tokenizer.encode(c["text"].get<std::string>(), special);
          bool same = e.ids == c[special ? "ids_special" : "ids"].get<std::vector<int32_t>>();
          if (!special) {
            std::vector<std::pair<size_t, size_t>> want;
            for (const auto& o : c["offsets"]) want.emplace_back(o[0].get<size_t>(), o[1].get<size_t>());
            same = same && char_offsets(c["text"].get<std::string>(), e.offsets) == want;
          }
          ++checked;
          if (!same) {
            ++wrong;
            size_t seen = first_wrong.load();
            while (i < seen && !first_wrong.compare_exchange_weak(seen, i)) {
            }
          }
        }
      }
    });
    EXPECT_EQ(checked.load(), static_cast<int64_t>(kThreads * kRounds * n));
    EXPECT_EQ(wrong.load(), 0) << "first differing text: "
                               << (first_wrong < n ? cases[first_wrong.load()]["text"].dump() : "");
    ++families;
  }
  EXPECT_GE(families, 6);
}

TEST(TextConcurrency, OneChatTemplateRendersOnManyThreadsAsTransformersDoes) {
  const auto ref = fixture("chat_templates.json");
  if (!ref) GTEST_SKIP() << "no chat_templates.json: build the qtrain_chat_template_fixtures target, run through ctest";
  std::tm clock{};
  const auto& when = ref->at("clock");
  clock.tm_year = when[0].get<int>() - 1900;
  clock.tm_mon = when[1].get<int>() - 1;
  clock.tm_mday = when[2].get<int>();
  clock.tm_hour = when[3].get<int>();
  clock.tm_min = when[4].get<int>();
  clock.tm_sec = when[5].get<int>();
  std::mktime(&clock);
  // The cases transformers rendered, each template parsed once and shared by every thread.
  struct Case {
    std::unique_ptr<ChatTemplate> chat_template;
    ChatTemplateInput input;
    std::string want;
  };
  std::vector<Case> cases;
  for (const auto& c : ref->at("cases")) {
    if (!c.contains("text")) continue;
    Case k;
    // A case with "named" renders qtrain's named template of that name (see chat_template_test.cpp).
    const auto source =
        c.contains("named") ? named_chat_template(c["named"].get<std::string>()) : c["template"].get<std::string>();
    k.chat_template = std::make_unique<ChatTemplate>(source, c["name"].get<std::string>());
    k.chat_template->set_clock([clock] { return clock; });
    k.input.messages = c["messages"];
    k.input.tools = c["tools"];
    k.input.add_generation_prompt = c["add_generation_prompt"];
    k.input.variables = c["variables"];
    k.want = c["text"];
    cases.push_back(std::move(k));
  }
  ASSERT_GT(cases.size(), 50u);
  const size_t n = cases.size();
  std::atomic<int64_t> wrong{0};
  std::atomic<size_t> first_wrong{n};
  on_threads([&](int t) {
    for (int round = 0; round < kRounds; ++round) {
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (k * (2 * t + 1) + static_cast<size_t>(t) * n / kThreads) % n;
        std::string got;
        try {
          got = cases[i].chat_template->render(cases[i].input).text;
        } catch (const TemplateError& e) {
          got = std::string("error: ") + e.what();
        }
        if (got != cases[i].want) {
          ++wrong;
          size_t seen = first_wrong.load();
          while (i < seen && !first_wrong.compare_exchange_weak(seen, i)) {
          }
        }
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0) << "first differing template: "
                             << (first_wrong < n ? cases[first_wrong.load()].chat_template->name() : "");
}

}  // namespace
}  // namespace qtrain::engine::text
