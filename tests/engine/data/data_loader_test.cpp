// Tests for engine/data/data_loader: the portable shuffle (pinned against an independent Python
// mt19937_64), the eval split, and the loader: every sample once per epoch, seed determinism,
// the batch layout (padding, labels, positions, segments), first-fit packing, resume by seek
// across an epoch boundary, and the predicted-token count.
#include "engine/data/data_loader.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "tests/expect_error.h"

namespace qtrain::engine::data {
namespace {

using test::expect_error;

// Sample i has a unique first token 1000 + i, length lengths[i], and labels = ids except that
// every third token (from index 2) is masked, so masks inside samples are exercised too.
std::vector<Sample> make_samples(const std::vector<int64_t>& lengths) {
  std::vector<Sample> samples;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Sample s;
    for (int64_t t = 0; t < lengths[i]; ++t) {
      const int64_t id = t == 0 ? 1000 + static_cast<int64_t>(i) : 10 + t;
      s.input_ids.push_back(id);
      s.labels.push_back(t % 3 == 2 ? -100 : id);
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<int64_t> lengths_between(size_t n, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(lo + static_cast<int64_t>(uniform_below(rng, hi - lo + 1)));
  return out;
}

// Which sample the token at (row, t) starts, from the unique first token; -1 if none.
int64_t sample_of_first_token(const at::Tensor& ids, int64_t row, int64_t t) {
  const int64_t id = ids[row][t].item<int64_t>();
  return id >= 1000 ? id - 1000 : -1;
}

// Checks one batch against Note [Packed batch layout] and returns the samples it holds, row by
// row, in order.
std::vector<std::vector<int64_t>> check_layout(const Batch& b, const std::vector<Sample>& samples, int64_t pad_id) {
  std::vector<std::vector<int64_t>> rows;
  const int64_t B = b.input_ids.size(0);
  const int64_t T = b.input_ids.size(1);
  for (const auto* t : {&b.labels, &b.position_ids, &b.segment_ids}) {
    EXPECT_EQ(t->sizes(), b.input_ids.sizes());
    EXPECT_EQ(t->scalar_type(), at::kLong);
  }
  EXPECT_EQ(b.input_ids.scalar_type(), at::kLong);
  for (int64_t r = 0; r < B; ++r) {
    rows.emplace_back();
    int64_t t = 0;
    for (int64_t seg = 0; t < T && b.segment_ids[r][t].item<int64_t>() != -1; ++seg) {
      EXPECT_EQ(b.segment_ids[r][t].item<int64_t>(), seg);
      const int64_t index = sample_of_first_token(b.input_ids, r, t);
      EXPECT_GE(index, 0) << "row " << r << " t " << t << ": a segment does not start with a sample's first token";
      if (index < 0) return rows;
      rows.back().push_back(index);
      const Sample& s = samples[index];
      for (size_t k = 0; k < s.input_ids.size(); ++k, ++t) {
        EXPECT_EQ(b.input_ids[r][t].item<int64_t>(), s.input_ids[k]);
        EXPECT_EQ(b.position_ids[r][t].item<int64_t>(), static_cast<int64_t>(k));
        EXPECT_EQ(b.segment_ids[r][t].item<int64_t>(), seg);
        // The segment start is never a target: the previous token belongs to another sample.
        EXPECT_EQ(b.labels[r][t].item<int64_t>(), k == 0 ? -100 : s.labels[k]) << "row " << r << " t " << t;
      }
    }
    for (; t < T; ++t) {
      EXPECT_EQ(b.input_ids[r][t].item<int64_t>(), pad_id);
      EXPECT_EQ(b.labels[r][t].item<int64_t>(), -100);
      EXPECT_EQ(b.segment_ids[r][t].item<int64_t>(), -1);
      EXPECT_EQ(b.position_ids[r][t].item<int64_t>(), 0);
    }
  }
  return rows;
}

// Targets of a sample: labels[1..] that are not -100.
int64_t targets(const Sample& s) {
  return std::count_if(s.labels.begin() + 1, s.labels.end(), [](int64_t l) { return l != -100; });
}

bool batches_equal(const Batch& a, const Batch& b) {
  return a.input_ids.equal(b.input_ids) && a.labels.equal(b.labels) && a.position_ids.equal(b.position_ids) &&
         a.segment_ids.equal(b.segment_ids);
}

TEST(PortableShuffleTest, PinnedToIndependentImplementation) {
  // Expected values from a Python mt19937_64 written from the standard's parameters, with the
  // draw and shuffle of data_loader.h: they hold on any standard library.
  std::mt19937_64 rng(1);
  std::vector<uint64_t> dice;
  for (int i = 0; i < 10; ++i) dice.push_back(uniform_below(rng, 6));
  EXPECT_EQ(dice, (std::vector<uint64_t>{2, 0, 0, 0, 0, 3, 2, 3, 2, 4}));
  // A bound just above 2^63 rejects about half the raw draws: the rejection path.
  std::mt19937_64 wide(1);
  const uint64_t bound = (uint64_t{1} << 63) + 1;
  EXPECT_EQ(uniform_below(wide, bound), 7588216632478230600ull);
  EXPECT_EQ(uniform_below(wide, bound), 1288452476385911039ull);
  EXPECT_EQ(uniform_below(wide, bound), 2494575675009433615ull);

  EXPECT_EQ(seeded_permutation(10, 42), (std::vector<size_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
  EXPECT_EQ(seeded_permutation(10, 43), (std::vector<size_t>{2, 4, 3, 8, 1, 7, 5, 9, 0, 6}));
  EXPECT_EQ(seeded_permutation(1, 7), (std::vector<size_t>{0}));
  EXPECT_TRUE(seeded_permutation(0, 7).empty());
}

TEST(DatasetSplitTest, SizesFollowTrainTestSplit) {
  const auto samples = make_samples(std::vector<int64_t>(10, 3));
  const std::vector<std::pair<double, size_t>> cases = {
      {0.0, 0}, {0.1, 1}, {0.05, 1}, {0.25, 3}, {0.5, 5}, {0.9, 9}, {1, 1}, {3, 3}, {9, 9}};
  for (const auto& [val, held_out] : cases) {
    const auto split = split_for_eval(samples, val, 42);
    EXPECT_EQ(split.eval.size(), held_out) << val;
    EXPECT_EQ(split.train.size(), 10 - held_out) << val;
  }
  expect_error([&] { split_for_eval(samples, 0.95, 42); },
               "val_set_size 0.95 holds out 10 of the 10 samples and leaves none for training; lower val_set_size "
               "or add data");
  expect_error([&] { split_for_eval(samples, 10, 42); }, "holds out 10 of the 10 samples");
  expect_error([&] { split_for_eval(samples, 2.5, 42); },
               "val_set_size 2.5 is neither a fraction below 1 nor a whole number of rows; use e.g. 0.05 or 100");
  expect_error([&] { split_for_eval(samples, -0.1, 42); }, "val_set_size must be a fraction in [0, 1)");
}

TEST(DatasetSplitTest, DeterministicBySeedAndKeepsFileOrder) {
  const auto samples = make_samples(std::vector<int64_t>(100, 2));
  const auto first_tokens = [](const std::vector<Sample>& part) {
    std::vector<int64_t> out;
    for (const auto& s : part) out.push_back(s.input_ids[0] - 1000);
    return out;
  };
  const auto a = split_for_eval(samples, 0.1, 7);
  const auto b = split_for_eval(samples, 0.1, 7);
  const auto c = split_for_eval(samples, 0.1, 8);
  EXPECT_EQ(first_tokens(a.eval), first_tokens(b.eval));
  EXPECT_EQ(first_tokens(a.train), first_tokens(b.train));
  EXPECT_NE(first_tokens(a.eval), first_tokens(c.eval));

  // Eval = the first 10 of the seed's permutation; both parts ascending; together all rows.
  auto perm = seeded_permutation(100, 7);
  std::vector<int64_t> expected(perm.begin(), perm.begin() + 10);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(first_tokens(a.eval), expected);
  auto train = first_tokens(a.train);
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end()));
  std::set<int64_t> all(train.begin(), train.end());
  all.insert(expected.begin(), expected.end());
  EXPECT_EQ(all.size(), 100u);
}

TEST(DataLoaderTest, UnpackedEpochsVisitEachSampleOnceInSeededOrder) {
  const auto samples = make_samples(lengths_between(10, 1, 8, 3));
  DataLoader loader(samples, 3, 8, false, 42, 0);
  EXPECT_EQ(loader.batches_per_epoch(), 4);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (int64_t b = 0; b < 4; ++b) {
      EXPECT_EQ(loader.position(), (DataLoader::Position{epoch, b}));
      const auto batch = loader.next();
      EXPECT_EQ(batch.input_ids.size(0), b < 3 ? 3 : 1);
      for (const auto& row : check_layout(batch, samples, 0)) {
        ASSERT_EQ(row.size(), 1u);
        seen.push_back(row[0]);
      }
    }
    const auto order = seeded_permutation(10, 42 + epoch);
    EXPECT_EQ(seen, std::vector<int64_t>(order.begin(), order.end())) << "epoch " << epoch;
  }
  EXPECT_EQ(loader.position(), (DataLoader::Position{3, 0}));
}

TEST(DataLoaderTest, RightPaddingLayout) {
  // Lengths 2, 5, 3 in one batch: width 5, pad id 7.
  const auto samples = make_samples({2, 5, 3});
  DataLoader loader(samples, 3, 8, false, 1, 7);
  const auto b = loader.next();
  ASSERT_EQ(b.input_ids.sizes(), (at::IntArrayRef{3, 5}));
  const auto rows = check_layout(b, samples, 7);
  // Spelled out for the row that holds sample 0 ([1000, 11], labels [1000, 11]).
  for (int64_t r = 0; r < 3; ++r) {
    if (rows[r][0] != 0) continue;
    EXPECT_TRUE(b.input_ids[r].equal(at::tensor({1000, 11, 7, 7, 7}, at::kLong)));
    EXPECT_TRUE(b.labels[r].equal(at::tensor({-100, 11, -100, -100, -100}, at::kLong)));
    EXPECT_TRUE(b.position_ids[r].equal(at::tensor({0, 1, 0, 0, 0}, at::kLong)));
    EXPECT_TRUE(b.segment_ids[r].equal(at::tensor({0, 0, -1, -1, -1}, at::kLong)));
  }
  // Targets: sample 0: 1 (label 11); sample 1: labels[1..4] = 11, -100, 13, 14 -> 3; sample 2: 11, -100 -> 1.
  EXPECT_EQ(b.tokens(), 5);
}

TEST(DataLoaderTest, SameSeedSameOrderOtherSeedOtherOrder) {
  const auto samples = make_samples(lengths_between(40, 1, 16, 5));
  for (const bool packing : {false, true}) {
    DataLoader a(samples, 2, 16, packing, 42, 0);
    DataLoader b(samples, 2, 16, packing, 42, 0);
    DataLoader c(samples, 2, 16, packing, 43, 0);
    bool all_same_as_c = true;
    for (int64_t i = 0; i < 2 * a.batches_per_epoch(); ++i) {
      const auto x = a.next();
      EXPECT_TRUE(batches_equal(x, b.next())) << "packing " << packing << " batch " << i;
      const auto z = c.next();
      all_same_as_c = all_same_as_c && x.input_ids.sizes() == z.input_ids.sizes() && x.input_ids.equal(z.input_ids);
    }
    EXPECT_FALSE(all_same_as_c) << "packing " << packing;
  }
}

TEST(DataLoaderTest, PackingIsFirstFitAndNeverSplitsASample) {
  const int64_t T = 16;
  const auto lengths = lengths_between(60, 1, T, 9);
  const auto samples = make_samples(lengths);
  DataLoader loader(samples, 4, T, true, 42, 0);

  // Reference first-fit, the slow way, over the documented visiting order.
  std::vector<std::vector<size_t>> expected;
  std::vector<int64_t> used;
  for (const size_t s : seeded_permutation(samples.size(), 42)) {
    size_t r = 0;
    while (r < expected.size() && used[r] + lengths[s] > T) ++r;
    if (r == expected.size()) {
      expected.emplace_back();
      used.push_back(0);
    }
    expected[r].push_back(s);
    used[r] += lengths[s];
  }
  EXPECT_EQ(loader.packed_rows(), expected);
  EXPECT_LT(expected.size(), samples.size());  // it did pack
  EXPECT_EQ(loader.batches_per_epoch(), static_cast<int64_t>((expected.size() + 3) / 4));

  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    std::vector<size_t> row_order;
    for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      const auto batch = loader.next();
      EXPECT_EQ(batch.input_ids.size(1), T);
      int64_t expected_tokens = 0;
      for (const auto& row : check_layout(batch, samples, 0)) {
        // Whole samples only: check_layout walked each one from its first token to its last.
        std::vector<size_t> as_sizes(row.begin(), row.end());
        const auto it = std::find(expected.begin(), expected.end(), as_sizes);
        ASSERT_NE(it, expected.end()) << "a batch row is not one of the packed rows";
        row_order.push_back(static_cast<size_t>(it - expected.begin()));
        for (const int64_t s : row) {
          seen.insert(s);
          expected_tokens += targets(samples[s]);
        }
      }
      EXPECT_EQ(batch.tokens(), expected_tokens);
    }
    EXPECT_EQ(seen.size(), samples.size());
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), samples.size()) << "a sample came twice";
    EXPECT_EQ(row_order, seeded_permutation(expected.size(), 42 + epoch)) << "epoch " << epoch;
  }
}

TEST(DataLoaderTest, SeekResumesExactlyAcrossAnEpochBoundary) {
  const auto samples = make_samples(lengths_between(23, 1, 12, 11));
  for (const bool packing : {false, true}) {
    SCOPED_TRACE(packing ? "packing" : "no packing");
    DataLoader run(samples, 3, 12, packing, 5, 0);
    const int64_t per_epoch = run.batches_per_epoch();
    ASSERT_GE(per_epoch, 2);
    std::vector<std::pair<DataLoader::Position, Batch>> history;
    for (int64_t i = 0; i < 3 * per_epoch; ++i) {
      const auto p = run.position();
      history.emplace_back(p, run.next());
    }
    // Resume two batches before the end of epoch 0 and read into epoch 2; also from epoch 1's start.
    for (const int64_t start : {per_epoch - 2, per_epoch}) {
      DataLoader resumed(samples, 3, 12, packing, 5, 0);
      // A loader that already moved elsewhere is repositioned too.
      resumed.next();
      resumed.seek(history[start].first);
      for (size_t i = static_cast<size_t>(start); i < history.size(); ++i) {
        EXPECT_EQ(resumed.position(), history[i].first);
        EXPECT_TRUE(batches_equal(resumed.next(), history[i].second)) << "batch " << i << " from " << start;
      }
    }
  }
}

TEST(DataLoaderTest, TokensCountsShiftedTargetsWithinSegments) {
  // Row 0: sample A [a0 a1 a2] labels [a0 -100 a2] then B [b0 b1] labels [b0 b1]; row 1 padding.
  Batch b;
  b.input_ids = at::tensor({1, 2, 3, 4, 5, 6, 0, 0}, at::kLong).view({2, 4});
  b.labels = at::tensor({-100, -100, 3, -100, -100, 6, -100, -100}, at::kLong).view({2, 4});
  b.segment_ids = at::tensor({0, 0, 0, 1, 0, 0, -1, -1}, at::kLong).view({2, 4});
  b.position_ids = at::tensor({0, 1, 2, 0, 0, 1, 0, 0}, at::kLong).view({2, 4});
  EXPECT_EQ(b.tokens(), 2);
  // A label at a segment start is not predicted even if set: the previous token is another sample.
  b.labels[0][3] = 4;
  EXPECT_EQ(b.tokens(), 2);
}

TEST(DataLoaderTest, RejectsBadInput) {
  expect_error([] { DataLoader({}, 1, 8, false, 0, 0); }, "DataLoader: no samples to train on");
  expect_error([] { DataLoader(make_samples({9}), 1, 8, false, 0, 0); },
               "DataLoader: sample 0 has 9 tokens; samples need 1 to sequence_len (8) tokens (load_dataset drops or "
               "truncates longer ones)");
  expect_error([] { DataLoader(make_samples({0}), 1, 8, true, 0, 0); }, "sample 0 has 0 tokens");
  expect_error([] { DataLoader(make_samples({2}), 0, 8, false, 0, 0); }, "micro_batch_size must be at least 1, got 0");
  auto bad = make_samples({3});
  bad[0].labels.pop_back();
  expect_error([&] { DataLoader(bad, 1, 8, false, 0, 0); }, "sample 0 has 3 input_ids but 2 labels");

  DataLoader loader(make_samples({2, 2, 2}), 2, 8, false, 0, 0);
  expect_error(
      [&] {
        loader.seek({0, 2});
      },
      "DataLoader::seek: position (epoch 0, batch 2) is outside the data, which has 2 batches per epoch; was "
      "the checkpoint saved with other data, micro_batch_size, sequence_len or sample_packing?");
  expect_error([&] { loader.seek({-1, 0}); }, "position (epoch -1, batch 0)");
}

}  // namespace
}  // namespace qtrain::engine::data
