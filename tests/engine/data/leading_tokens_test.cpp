// Tests for engine/data/leading_tokens (Note [Leading tokens]): for the byte tokenizer and every
// tokenizer.json of the fixtures (Llama 3, Llama 2, Gemma 3, Qwen 3, Mistral), the leading tokens
// of a long text equal the first tokens of the whole text, a word far longer than the prefix
// straddling its cut included, while only a bounded prefix is tokenized; and a multi-megabyte
// completion row is truncated to the same sample as before while tokenizing about 100 KB of it.
#include "engine/data/leading_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/dataset.h"
#include "engine/data/hf_tokenizer.h"
#include "engine/io/remove_tree.h"
#include "tests/temp_dir.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;

// Counts the bytes it is asked to tokenize.
class CountingTokenizer : public TextTokenizer {
 public:
  explicit CountingTokenizer(const TextTokenizer& inner) : inner_(inner) {}
  TokenizedText tokenize(std::string_view text, bool add_special_tokens) const override {
    bytes += text.size();
    return inner_.tokenize(text, add_special_tokens);
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    return inner_.decode(ids, skip_special_tokens);
  }
  int64_t eos_id() const override { return inner_.eos_id(); }
  int64_t pad_id() const override { return inner_.pad_id(); }
  std::optional<int64_t> id_of(std::string_view token) const override { return inner_.id_of(token); }
  std::string bos_token() const override { return inner_.bos_token(); }
  std::string eos_token() const override { return inner_.eos_token(); }
  std::optional<std::string> chat_template() const override { return inner_.chat_template(); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }

  mutable std::atomic<size_t> bytes = 0;  // rows may be tokenized on several threads

 private:
  const TextTokenizer& inner_;
};

// Words, numbers, punctuation, newlines and non-ASCII text from a fixed generator, with one
// run of `run` letters without a space starting at byte `run_at`.
std::string long_text(size_t bytes, size_t run_at, size_t run) {
  static const std::vector<std::string> words = {"the",
                                                 "model",
                                                 "café",
                                                 "naïve",
                                                 "1234567",
                                                 "tokens",
                                                 "—",
                                                 "日本語のテキスト",
                                                 "\n\n",
                                                 "  ",
                                                 "x",
                                                 "Ωmega",
                                                 ",",
                                                 "."};
  std::string s;
  uint64_t state = 12345;
  while (s.size() < bytes) {
    if (s.size() >= run_at && s.size() < run_at + run) {
      s += std::string(run, 'a');
      continue;
    }
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    s += words[(state >> 33) % words.size()];
    if ((state >> 20) % 3 != 0) s += ' ';
  }
  return s;
}

std::vector<std::unique_ptr<TextTokenizer>> tokenizers() {
  std::vector<std::unique_ptr<TextTokenizer>> out;
  out.push_back(std::make_unique<ByteTokenizer>());
  const char* fixtures = std::getenv("QTRAIN_FIXTURES");
  if (fixtures) {
    for (const char* name : {"llama3", "llama2_nonlegacy", "gemma3", "qwen3", "mistral_tekken"}) {
      out.push_back(std::make_unique<HfTokenizer>(HfTokenizer::load(fs::path(fixtures) / "tokenizers" / name)));
    }
  }
  return out;
}

TEST(LeadingTokens, EqualTheWholeTextsFirstTokensWhileTokenizingABoundedPrefix) {
  const size_t max_tokens = 300;
  // A run of 20 KB without a space across the first cuts (about 9 KB and 18 KB), and none.
  for (const auto& [run_at, run] : {std::pair<size_t, size_t>{5000, 20000}, {0, 0}}) {
    const std::string text = long_text(400'000, run_at, run);
    for (const auto& tokenizer : tokenizers()) {
      for (const bool special : {true, false}) {
        SCOPED_TRACE(std::to_string(run) + " " + std::to_string(special));
        const TokenizedText whole = tokenizer->tokenize(text, special);
        ASSERT_GT(whole.ids.size(), max_tokens + 1);
        CountingTokenizer counting(*tokenizer);
        bool cut = false;
        const TokenizedText lead = tokenize_leading(counting, text, special, max_tokens, &cut);
        EXPECT_TRUE(cut);
        ASSERT_EQ(lead.ids.size(), max_tokens + 1);
        EXPECT_TRUE(std::equal(lead.ids.begin(), lead.ids.end(), whole.ids.begin()));
        EXPECT_TRUE(std::equal(lead.spans.begin(), lead.spans.end(), whole.spans.begin()));
        // Without the run: the first two prefixes settle it. With it: a few doublings at most.
        EXPECT_LE(counting.bytes, (run == 0 ? 3 : 15) * leading_prefix_bytes(max_tokens)) << counting.bytes.load();
      }
    }
  }
}

TEST(LeadingTokens, AShortTextIsTokenizedWhole) {
  const ByteTokenizer bytes;
  const std::string text = long_text(5000, 0, 0);
  bool cut = true;
  EXPECT_EQ(tokenize_leading(bytes, text, true, 10'000, &cut).ids, bytes.tokenize(text, true).ids);
  EXPECT_FALSE(cut);
}

// The case of issue 13: one huge text row. The sample is the one the whole row gives, cut to
// sequence_len, and only a prefix of the row is tokenized.
TEST(LeadingTokens, AMultiMegabyteCompletionRowTokenizesOnlyAPrefix) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  const std::string text = long_text(4'000'000, 0, 0);
  std::ofstream(dir / "big.jsonl") << nlohmann::json{{"text", text}}.dump() << "\n";
  config::DatasetConfig d;
  d.path = dir / "big.jsonl";
  d.type = "completion";
  d.excess_length_strategy = "truncate";
  for (const auto& tokenizer : tokenizers()) {
    CountingTokenizer counting(*tokenizer);
    DatasetStats stats;
    const auto samples = load_dataset(d, &counting, 512, false, &stats);
    ASSERT_EQ(samples.size(), 1u);
    EXPECT_EQ(stats.truncated, 1);
    EXPECT_LE(counting.bytes, 3 * leading_prefix_bytes(512));
    const auto whole = tokenizer->tokenize(std::string_view(text).substr(0, 200'000), true).ids;
    EXPECT_EQ(samples[0].input_ids, std::vector<int64_t>(whole.begin(), whole.begin() + 512));
  }
  qtrain::engine::io::remove_tree(dir);
}

// The same for a conversation (Note [Long chat rows]): a 1.5 MB assistant turn after a
// short user turn. Cut to sequence_len (truncate), the ids and labels are those of the whole
// conversation (read with a sequence_len that cuts nothing), while only a prefix is tokenized;
// dropped (drop), it costs the same prefix. With train_on_eot: last the end of turn past the cut
// decides, so the conversation is tokenized whole: the same sample, and a rendered size above
// 16 MiB is refused with the ways out.
TEST(LeadingTokens, AMultiMegabyteConversationTokenizesOnlyAPrefix) {
  const auto dir = test::fresh_test_dir(/*create=*/true);
  const std::string text = long_text(1'500'000, 0, 0);
  const nlohmann::json row = {
      {"messages",
       {{{"role", "user"}, {"content", "Write a long story."}}, {{"role", "assistant"}, {"content", text}}}}};
  // A short conversation after it, kept whatever the strategy.
  const nlohmann::json short_row = {
      {"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello there."}}}}};
  std::ofstream(dir / "chat.jsonl") << row.dump() << "\n" << short_row.dump() << "\n";
  config::DatasetConfig d;
  d.path = dir / "chat.jsonl";
  d.type = "chat_template";
  d.chat_template_source = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}\n{% endfor %}";
  d.roles_to_train = {"assistant"};
  for (const auto& tokenizer : tokenizers()) {
    SCOPED_TRACE(tokenizer->eos_token());
    d.excess_length_strategy = "truncate";
    const auto whole = load_dataset(d, tokenizer.get(), 10'000'000, false);
    ASSERT_EQ(whole.size(), 2u);
    ASSERT_GT(whole[0].input_ids.size(), 600u);
    CountingTokenizer counting(*tokenizer);
    DatasetStats stats;
    const auto cut = load_dataset(d, &counting, 512, false, &stats);
    ASSERT_EQ(cut.size(), 2u);
    EXPECT_EQ(stats.truncated, 1);
    EXPECT_LE(counting.bytes, 3 * leading_prefix_bytes(512) + 100) << counting.bytes.load();
    EXPECT_EQ(cut[0].input_ids, std::vector<int64_t>(whole[0].input_ids.begin(), whole[0].input_ids.begin() + 512));
    EXPECT_EQ(cut[0].labels, std::vector<int64_t>(whole[0].labels.begin(), whole[0].labels.begin() + 512));
    EXPECT_NE(std::count(cut[0].labels.begin(), cut[0].labels.end(), -100), 512);  // the story is trained

    d.excess_length_strategy = "drop";
    CountingTokenizer dropping(*tokenizer);
    DatasetStats dropped;
    EXPECT_EQ(load_dataset(d, &dropping, 512, false, &dropped).size(), 1u);
    EXPECT_EQ(dropped.dropped_long, 1);
    EXPECT_LE(dropping.bytes, 3 * leading_prefix_bytes(512) + 100) << dropping.bytes.load();

    d.excess_length_strategy = "truncate";
    d.train_on_eot = d.train_on_eos = "last";
    CountingTokenizer last(*tokenizer);
    const auto with_last = load_dataset(d, &last, 512, false);
    ASSERT_EQ(with_last.size(), 2u);
    EXPECT_GE(last.bytes, text.size());  // tokenized whole
    const auto reference = load_dataset(d, tokenizer.get(), 10'000'000, false);
    EXPECT_EQ(with_last[0].labels,
              std::vector<int64_t>(reference[0].labels.begin(), reference[0].labels.begin() + 512));
    d.train_on_eos = "turn";
    d.train_on_eot.clear();
  }
  d.excess_length_strategy = "truncate";
  d.train_on_eot = d.train_on_eos = "last";
  const nlohmann::json huge = {{"messages", {{{"role", "assistant"}, {"content", long_text(17'000'000, 0, 0)}}}}};
  std::ofstream(dir / "chat.jsonl") << huge.dump() << "\n";
  ByteTokenizer bytes;
  try {
    load_dataset(d, &bytes, 512, false);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir / "chat.jsonl").string() + ":1: the conversation renders to "), std::string::npos) << what;
    EXPECT_NE(what.find("use excess_length_strategy: drop, or train_on_eot: turn"), std::string::npos) << what;
  }
  qtrain::engine::io::remove_tree(dir);
}

}  // namespace
}  // namespace qtrain::engine::data
