// Turns samples into micro-batches for training: the held-out evaluation split, a shuffle per
// epoch that is the same on every machine, optional sample packing, and a position that a
// checkpoint saves so that a resumed run sees exactly the batches the uninterrupted run would have.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/data/pretokenized.h"

namespace qtrain::engine::data {

// Note [Portable shuffle]
// The order of samples must depend on the seed alone: a run resumed on another machine, or built
// with another standard library, has to see the same batches. std::mt19937_64's output is fixed by
// the C++ standard, but std::uniform_int_distribution and std::shuffle are not (libstdc++ and libc++
// draw differently, and libstdc++ changed its algorithm between versions). So qtrain draws bounded
// integers itself (uniform_below) and shuffles with its own Fisher-Yates (seeded_permutation).

// A uniform integer in [0, bound), bound >= 1, from `rng`'s raw output without modulo bias: draw
// x, reject it while x < 2^64 mod bound, return x mod bound.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);

// A permutation of 0..n-1: start from the identity, then for i = n-1 down to 1 swap element i
// with element uniform_below(rng, i + 1), rng = std::mt19937_64(seed). See Note [Portable shuffle].
std::vector<size_t> seeded_permutation(size_t n, uint64_t seed);

struct Split {
  std::vector<Sample> train, eval;
};
// Which of n rows are held out for evaluation. val_set_size < 1 is a fraction of the rows, rounded
// up as Hugging Face datasets' train_test_split does (ceil(n * fraction)); >= 1 is a number of
// rows; 0 holds out none. The rows are the first ones of seeded_permutation(n, seed). An error if
// it would leave no training rows.
std::vector<bool> held_out_rows(size_t n, double val_set_size, uint64_t seed);
// The samples split by held_out_rows; both parts keep file order.
Split split_for_eval(std::vector<Sample> samples, double val_set_size, uint64_t seed);

// Where a loader is: its next batch is batch `batch` of epoch `epoch` (a checkpoint records it).
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const LoaderPosition&) const = default;
};

// Which of `units` things (samples, packed rows, preference pairs) each micro-batch takes: epoch e
// visits them in the order seeded_permutation(units, seed + e), micro_batch_size at a time (the
// epoch's last batch may be smaller), then epoch e + 1 begins. The one epoch order of DataLoader
// and PairLoader (preference_pairs.h).
class EpochOrder {
 public:
  EpochOrder() = default;
  // `sequential`: every epoch in the units' order instead of a seeded permutation.
  EpochOrder(size_t units, int64_t micro_batch_size, uint64_t seed, bool sequential = false);
  int64_t batches_per_epoch() const;
  // The units of the batch at position(), then advances.
  std::vector<size_t> next();
  LoaderPosition position() const { return position_; }
  // Whether `p` names a batch of the data (a loader's seek says what else to check).
  bool holds(LoaderPosition p) const;
  void seek(LoaderPosition p) { position_ = p; }

 private:
  size_t units_ = 0;
  int64_t micro_batch_size_ = 1;
  uint64_t seed_ = 0;
  bool sequential_ = false;
  LoaderPosition position_;
  std::vector<size_t> order_;  // the order of epoch order_epoch_, recomputed on a new epoch
  int64_t order_epoch_ = -1;
};

// Micro-batches of `samples`, epoch after epoch, in an order fixed by the seed.
//
// Without packing, epoch e visits the samples in the order seeded_permutation(n, seed + e), and a
// micro-batch is the next micro_batch_size of them (the epoch's last one may be smaller), one per
// row, right-padded to the longest with pad_id.
//
// With packing, samples are packed into rows once, at construction: greedy first-fit, visiting the
// samples in the order seeded_permutation(n, seed); each sample goes into the first (lowest
// numbered) row that still has room for all of it, or opens a new row. Rows are sequence_len
// tokens, padded at the end. A sample is never split (samples are at most sequence_len long: see
// load_dataset). Epoch e then visits the rows in the order seeded_permutation(rows, seed + e), a
// micro-batch being the next micro_batch_size rows. Packing once rather than per epoch keeps
// batches_per_epoch fixed, which the LR schedule needs before the run starts; the batches still
// change from epoch to epoch.
//
// Every batch follows Note [Packed batch layout] (pretokenized.h). After the epoch's last batch,
// next() goes on with the next epoch.
class DataLoader {
 public:
  using Position = LoaderPosition;

  // Every sample must have 1..sequence_len tokens and as many labels.
  DataLoader(std::vector<Sample> samples,
             int64_t micro_batch_size,
             int64_t sequence_len,
             bool packing,
             uint64_t seed,
             int64_t pad_id);

  int64_t batches_per_epoch() const;
  // The batch at position(), then advances.
  Batch next();

  Position position() const { return order_.position(); }
  // Resume: after seek(p), next() returns what a loader that was at p returned.
  void seek(Position p);

  // Packed rows as sample indices, in packing order (empty without packing); for tests and stats.
  const std::vector<std::vector<size_t>>& packed_rows() const { return rows_; }
  size_t num_samples() const { return samples_.size(); }

 private:
  std::vector<Sample> samples_;
  int64_t sequence_len_;
  bool packing_;
  int64_t pad_id_;
  std::vector<std::vector<size_t>> rows_;  // with packing
  EpochOrder order_;                       // of the samples, or of the rows with packing
};

}  // namespace qtrain::engine::data
