// Tests for engine/data/row_map: the samples of completion, alpaca and chat_template datasets
// through the stand-in Hugging Face tokenizers are the same, bit for bit and in order, on 1 and 8
// threads over a file of many rounds; the first bad row's error wins over a later one that fails
// first on another thread; blank lines, several samples per row and the progress counts; a
// split converts only the rows it selects.
#include "engine/data/row_map.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"
#include "engine/data/hf_tokenizer.h"
#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}";

// Rows that differ from each other (so that a reordering shows), with non-ASCII text and words
// that repeat across rows (so that threads share the BPE cache).
std::string text_of(int i) {
  static const char* words[] = {"alpha", "café", "Привет", "日本語", "tokens", "naïve", "x=1;", "  spaced", "\n"};
  std::string s = "row " + std::to_string(i) + ":";
  for (int k = 0; k < 3 + i % 17; ++k) s += std::string(" ") + words[(i * 7 + k * 3) % 9] + std::to_string(k % 4);
  return s;
}

std::string rows_of(const std::string& type, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    nlohmann::ordered_json row;
    if (type == "completion") {
      row["text"] = text_of(i);
    } else if (type == "alpaca") {
      row["instruction"] = text_of(i);
      if (i % 3 != 0) row["input"] = text_of(i + 1);
      row["output"] = text_of(i + 2);
    } else {
      row["messages"] = {{{"role", "user"}, {"content", text_of(i)}},
                         {{"role", "assistant"}, {"content", text_of(i + 5)}}};
    }
    out += row.dump() + (i % 50 == 0 ? "\n\n" : "\n");  // and some blank lines
  }
  return out;
}

class RowMapTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/true); }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  fs::path write(const std::string& text, const std::string& name = "data.jsonl") {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

  // The stand-in tokenizer `family` (scripts/reference/make_test_tokenizers.py) with a ChatML
  // template; null without fixtures.
  std::unique_ptr<HfTokenizer> tokenizer(const std::string& family) {
    const char* fixtures = std::getenv("QTRAIN_FIXTURES");
    if (!fixtures) return nullptr;
    const fs::path source = fs::path(fixtures) / "tokenizers" / family;
    const fs::path dir = dir_ / family;
    fs::create_directories(dir);
    fs::copy_file(source / "tokenizer.json", dir / "tokenizer.json");
    auto config = nlohmann::ordered_json::parse(std::ifstream(source / "tokenizer_config.json"));
    config["chat_template"] = kChatMl;
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    return std::make_unique<HfTokenizer>(HfTokenizer::load(dir));
  }

  fs::path dir_;
};

TEST_F(RowMapTest, TextDatasetsAreTheSameOnOneAndEightThreads) {
  for (const std::string family : {"llama3", "qwen3"}) {
    const auto tok = tokenizer(family);
    if (!tok) GTEST_SKIP() << "QTRAIN_FIXTURES is not set";
    for (const std::string type : {"completion", "alpaca", "chat_template"}) {
      SCOPED_TRACE(family + " " + type);
      config::DatasetConfig d;
      d.path = write(rows_of(type, 1500), type + ".jsonl");
      d.type = type;
      RowMapOptions one;
      one.threads = 1;
      RowMapOptions eight;
      eight.threads = 8;
      eight.chunk_rows = 97;  // 16 rounds, the last one partial
      DatasetStats s1, s8;
      const auto a = load_dataset(d, tok.get(), 4096, false, &s1, one);
      const auto b = load_dataset(d, tok.get(), 4096, false, &s8, eight);
      ASSERT_EQ(s1.rows, 1500);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].input_ids, b[i].input_ids) << "sample " << i;
        ASSERT_EQ(a[i].labels, b[i].labels) << "sample " << i;
      }
      EXPECT_EQ(s1.truncated, s8.truncated);
      EXPECT_EQ(s1.dropped_long, s8.dropped_long);
      EXPECT_EQ(s1.dropped_untrained, s8.dropped_untrained);
      // Different rows give different samples, so the comparison above sees the order.
      EXPECT_NE(a[0].input_ids, a[1].input_ids);
    }
  }
}

TEST_F(RowMapTest, SamplesComeInLineOrderWithSeveralOrNonePerRow) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "{\"n\": " + std::to_string(i) + "}\n" + (i % 7 == 0 ? " \t\n" : "");
  const auto path = write(text);
  RowMapOptions options;
  options.threads = 6;
  options.chunk_rows = 64;
  int64_t last_done = -1, last_total = -1;
  options.progress = [&](int64_t done, int64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  // Row n gives n % 3 samples, each {n, k}; rows are slowed unevenly so that threads finish out of order.
  const auto samples = map_jsonl_rows(
      path, options, [](const nlohmann::ordered_json& row, const std::string&, std::vector<Sample>& out) {
        const int64_t n = row.at("n").get<int64_t>();
        if (n % 13 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
        for (int64_t k = 0; k < n % 3; ++k) out.push_back({{n, k}, {n, k}});
      });
  std::vector<Sample> expected;
  for (int64_t n = 0; n < 1000; ++n) {
    for (int64_t k = 0; k < n % 3; ++k) expected.push_back({{n, k}, {n, k}});
  }
  ASSERT_EQ(samples.size(), expected.size());
  for (size_t i = 0; i < samples.size(); ++i) ASSERT_EQ(samples[i].input_ids, expected[i].input_ids) << i;
  EXPECT_EQ(last_done, 1000);
  EXPECT_EQ(last_total, 1000);  // blank lines are not rows
}

// A dataset's split: the rows it selects, counted over non-blank lines (or array elements), are
// the ones converted, in order, in JSONL and JSON-array files alike; rows outside it are not even
// parsed (a broken one there is no error).
TEST_F(RowMapTest, ASplitConvertsOnlyTheRowsItSelects) {
  std::string jsonl = "{\"n\": 0}\n\n", array = "[{\"n\": 0}";
  for (int i = 1; i < 40; ++i) {
    jsonl += "{\"n\": " + std::to_string(i) + "}\n" + (i % 9 == 0 ? "  \n" : "");
    array += ", {\"n\": " + std::to_string(i) + "}";
  }
  jsonl += "not json\n";  // row 40, outside every slice below
  array += "]";
  const auto lines = write(jsonl), elements = write(array, "data.json");
  const auto numbers = [](const fs::path& path, const std::string& split, int64_t threads) {
    RowMapOptions options;
    options.threads = threads;
    options.chunk_rows = 7;
    options.slice = config::parse_split(split).slice;
    int64_t total = -1;
    options.progress = [&](int64_t, int64_t t) { total = t; };
    std::vector<int64_t> out;
    for (const auto& s : map_jsonl_rows(
             path, options, [](const nlohmann::ordered_json&row, const std::string&, std::vector<Sample>&samples) {
               samples.push_back({{row.at("n").get<int64_t>()}, {0}});
             })) {
      out.push_back(s.input_ids[0]);
    }
    if (path.extension() == ".jsonl") EXPECT_EQ(total, static_cast<int64_t>(out.size())) << split;
    return out;
  };
  const auto range = [](int64_t a, int64_t b) {
    std::vector<int64_t> v;
    for (int64_t i = a; i < b; ++i) v.push_back(i);
    return v;
  };
  for (const int64_t threads : {1, 4}) {
    // 41 rows in the JSONL file (the broken last one included), 40 in the array.
    EXPECT_EQ(numbers(lines, "train[:10%]", threads), range(0, 4));  // round(4.1)
    EXPECT_EQ(numbers(lines, "train[5:12]", threads), range(5, 12));
    EXPECT_EQ(numbers(lines, "train[-10%:-2%]", threads), range(37, 40));  // round(-0.82) = -1: not the broken last
    EXPECT_EQ(numbers(elements, "train[:10%]", threads), range(0, 4));     // round(4.0)
    EXPECT_EQ(numbers(elements, "train[-5:]", threads), range(35, 40));
  }
  expect_error([&] { numbers(lines, "train[-2:]", 1); }, "data.jsonl:46");
}

TEST_F(RowMapTest, TheFirstBadRowsErrorWinsOverALaterOneThatFailsFirst) {
  std::string text;
  for (int i = 1; i <= 200; ++i) text += "{\"n\": " + std::to_string(i) + "}\n";
  const auto path = write(text);
  RowMapOptions options;
  options.threads = 4;
  std::atomic<bool> later_failed{false};
  const auto slow_first = [&](const nlohmann::ordered_json& row, const std::string& where, std::vector<Sample>&) {
    const int64_t n = row.at("n").get<int64_t>();
    if (n == 3) {
      // Fails only after line 150 has failed on another thread.
      while (!later_failed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      TORCH_CHECK(false, where, ": first bad row");
    }
    if (n == 150) {
      later_failed = true;
      TORCH_CHECK(false, where, ": later bad row");
    }
  };
  expect_error([&] { map_jsonl_rows(path, options, slow_first); }, path.string() + ":3: first bad row");

  // Invalid JSON is a row error like any other, named by its line, also in a later round.
  const auto bad = write(text + "{\"n\": \n" + text, "bad.jsonl");
  options.chunk_rows = 16;
  expect_error([&] { map_jsonl_rows(bad, options, [](const auto&, const auto&, auto&) {}); },
               bad.string() + ":201: not valid JSON");
  expect_error([&] { map_jsonl_rows(dir_ / "missing.jsonl", options, [](const auto&, const auto&, auto&) {}); },
               "cannot open the dataset file");
}

TEST(RowMapThreads, ZeroMeansEveryCore) {
  EXPECT_EQ(row_map_threads(3), 3);
  EXPECT_EQ(row_map_threads(0), std::max<int64_t>(1, std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace qtrain::engine::data
