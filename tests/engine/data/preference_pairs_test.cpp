// Note [Preference batch]: pairs batched as TRL's DataCollatorForPreference batches them (chosen
// rows then rejected rows, each cut to max_length keeping its start, right-padded, labels on the
// completion only), pre-tokenized pair files read with errors that name the line, and the pair
// loader's epochs and resume.
#include "engine/data/preference_pairs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"

namespace qtrain::engine::data {
namespace {

namespace fs = std::filesystem;

TEST(PreferencePairs, ABatchIsTheChosenRowsThenTheRejectedRowsCutAtTheirEnd) {
  // TRL's docstring example, with max_length 4 cutting the first pair's chosen row.
  const auto b = collate_pairs({{{1, 2, 3}, {4, 5}, {6}}, {{7, 8}, {9}, {10, 11}}}, 4, 0);
  EXPECT_EQ(b.pairs, 2);
  EXPECT_TRUE(
      at::equal(b.input_ids, at::tensor({1, 2, 3, 4, 7, 8, 9, 0, 1, 2, 3, 6, 7, 8, 10, 11}, at::kLong).view({4, 4})));
  EXPECT_TRUE(at::equal(
      b.labels,
      at::tensor({-100, -100, -100, 4, -100, -100, 9, -100, -100, -100, -100, 6, -100, -100, 10, 11}, at::kLong)
          .view({4, 4})));
  EXPECT_EQ(b.tokens, 4 + 3 + 4 + 4);
}

TEST(PreferencePairs, FilesNameTheLineOfABadRow) {
  const fs::path dir = fs::temp_directory_path() / ("qtrain_pairs_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "p.jsonl") << text;
    return dir / "p.jsonl";
  };
  const auto good =
      read_preference_jsonl(write("{\"prompt_ids\": [1], \"chosen_ids\": [2], \"rejected_ids\": [3]}\n\n"
                                  "{\"prompt_ids\": [], \"chosen_ids\": [4, 5], \"rejected_ids\": [6]}\n"),
                            10);
  ASSERT_EQ(good.size(), 2u);
  EXPECT_EQ(good[1].chosen, (std::vector<int64_t>{4, 5}));
  const auto path = (dir / "p.jsonl").string();
  test::expect_error([&] { read_preference_jsonl(write("{\"prompt_ids\": [1], \"chosen_ids\": [2]}\n"), 10); },
                     path + ":1: a preference row needs \"prompt_ids\", \"chosen_ids\" and \"rejected_ids\"");
  test::expect_error(
      [&] { read_preference_jsonl(write("{\"prompt_ids\": [1], \"chosen_ids\": [], \"rejected_ids\": [3]}\n"), 10); },
      path + ":1: \"chosen_ids\" and \"rejected_ids\" must each hold a token");
  test::expect_error(
      [&] {
        read_preference_jsonl(write("\n{\"prompt_ids\": [1], \"chosen_ids\": [12], \"rejected_ids\": [3]}\n"), 10);
      },
      path + ":2: \"chosen_ids\"[0] is 12, outside the model's vocabulary [0, 10)");
  io::remove_tree(dir);
}

TEST(PreferencePairs, TheLoaderVisitsEachEpochInItsSeededOrderAndResumes) {
  std::vector<PreferencePair> pairs;
  for (int64_t i = 0; i < 5; ++i) pairs.push_back({{i}, {i}, {i}});
  PairLoader loader(pairs, 2, 7);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  std::vector<int64_t> seen;
  for (int b = 0; b < 6; ++b) {
    for (const auto& p : loader.next()) seen.push_back(p.prompt[0]);
  }
  ASSERT_EQ(seen.size(), 10u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto order = seeded_permutation(5, 7 + epoch);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(seen[epoch * 5 + i], static_cast<int64_t>(order[i])) << epoch;
  }
  PairLoader resumed(pairs, 2, 7);
  resumed.seek({1, 2});
  EXPECT_EQ(resumed.next()[0].prompt[0], seen[9]);
  test::expect_error([&] { resumed.seek({0, 3}); }, "outside the data's 3 batches per epoch");
}

}  // namespace
}  // namespace qtrain::engine::data
