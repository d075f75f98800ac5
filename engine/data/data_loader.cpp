// See data_loader.h.
#include "engine/data/data_loader.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <c10/util/Exception.h>

namespace qtrain::engine::data {
namespace {

// First-fit packing in O(n log n): a max-tree over row slots holds each row's free space
// (unopened rows: 0, so they never match), and the leftmost row with enough room is found by
// descending the tree.
class FirstFit {
 public:
  FirstFit(size_t max_rows, int64_t capacity) : capacity_(capacity) {
    while (leaves_ < max_rows) leaves_ *= 2;
    free_.assign(2 * leaves_, 0);
  }

  // The row the item of `len` tokens goes into.
  size_t place(int64_t len) {
    size_t node = 1;
    if (free_[node] < len) {
      // No open row has room: open the next one.
      node = leaves_ + rows_++;
      free_[node] = capacity_;
    } else {
      while (node < leaves_) node = free_[2 * node] >= len ? 2 * node : 2 * node + 1;
    }
    free_[node] -= len;
    for (size_t up = node / 2; up >= 1; up /= 2) free_[up] = std::max(free_[2 * up], free_[2 * up + 1]);
    return node - leaves_;
  }

 private:
  int64_t capacity_;
  size_t leaves_ = 1;
  size_t rows_ = 0;
  std::vector<int64_t> free_;
};

}  // namespace

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  TORCH_CHECK(bound >= 1, "uniform_below: bound must be at least 1");
  // 2^64 mod bound, in 64-bit arithmetic; the accepted range [threshold, 2^64) is a whole number
  // of `bound`-sized blocks, so x mod bound is uniform.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % bound;
  }
}

std::vector<size_t> seeded_permutation(size_t n, uint64_t seed) {
  std::vector<size_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = i;
  std::mt19937_64 rng(seed);
  for (size_t i = n; i-- > 1;) std::swap(p[i], p[uniform_below(rng, i + 1)]);
  return p;
}

std::vector<bool> held_out_rows(size_t n, double val_set_size, uint64_t seed) {
  TORCH_CHECK(std::isfinite(val_set_size) && val_set_size >= 0,
              "val_set_size must be a fraction in [0, 1) or a ",
              "number of rows, got ",
              val_set_size);
  TORCH_CHECK(val_set_size < 1 || val_set_size == std::floor(val_set_size),
              "val_set_size ",
              val_set_size,
              " is neither a fraction below 1 nor a whole number of rows; use e.g. 0.05 or 100");
  // The product in double, as Python computes it in train_test_split.
  const double wanted = val_set_size < 1 ? std::ceil(val_set_size * static_cast<double>(n)) : val_set_size;
  TORCH_CHECK(wanted < static_cast<double>(n),
              "val_set_size ",
              val_set_size,
              " holds out ",
              wanted,
              " of the ",
              n,
              " samples and leaves none for training; lower val_set_size or add data");
  const auto held_out = static_cast<size_t>(wanted);
  std::vector<bool> is_eval(n, false);
  if (held_out == 0) return is_eval;
  const auto order = seeded_permutation(n, seed);
  for (size_t i = 0; i < held_out; ++i) is_eval[order[i]] = true;
  return is_eval;
}

Split split_for_eval(std::vector<Sample> samples, double val_set_size, uint64_t seed) {
  const auto is_eval = held_out_rows(samples.size(), val_set_size, seed);
  Split split;
  for (size_t i = 0; i < samples.size(); ++i) (is_eval[i] ? split.eval : split.train).push_back(std::move(samples[i]));
  return split;
}

DataLoader::DataLoader(std::vector<Sample> samples,
                       int64_t micro_batch_size,
                       int64_t sequence_len,
                       bool packing,
                       uint64_t seed,
                       int64_t pad_id)
    : samples_(std::move(samples)), sequence_len_(sequence_len), packing_(packing), pad_id_(pad_id) {
  TORCH_CHECK(!samples_.empty(), "DataLoader: no samples to train on");
  TORCH_CHECK(micro_batch_size >= 1, "micro_batch_size must be at least 1, got ", micro_batch_size);
  TORCH_CHECK(sequence_len_ >= 2, "sequence_len must be at least 2, got ", sequence_len_);
  for (size_t i = 0; i < samples_.size(); ++i) {
    const auto len = static_cast<int64_t>(samples_[i].input_ids.size());
    TORCH_CHECK(len >= 1 && len <= sequence_len_,
                "DataLoader: sample ",
                i,
                " has ",
                len,
                " tokens; samples need 1 to sequence_len (",
                sequence_len_,
                ") tokens (load_dataset drops or truncates longer ones)");
    TORCH_CHECK(samples_[i].labels.size() == samples_[i].input_ids.size(),
                "DataLoader: sample ",
                i,
                " has ",
                len,
                " input_ids but ",
                samples_[i].labels.size(),
                " labels");
  }
  if (packing_) {
    FirstFit fit(samples_.size(), sequence_len_);
    for (const size_t s : seeded_permutation(samples_.size(), seed)) {
      const size_t row = fit.place(static_cast<int64_t>(samples_[s].input_ids.size()));
      if (row == rows_.size()) rows_.emplace_back();
      rows_[row].push_back(s);
    }
  }
  order_ = EpochOrder(packing_ ? rows_.size() : samples_.size(), micro_batch_size, seed);
}

EpochOrder::EpochOrder(size_t units, int64_t micro_batch_size, uint64_t seed, bool sequential)
    : units_(units), micro_batch_size_(micro_batch_size), seed_(seed), sequential_(sequential) {
  TORCH_CHECK(micro_batch_size_ >= 1, "micro_batch_size must be at least 1, got ", micro_batch_size_);
}

int64_t EpochOrder::batches_per_epoch() const {
  return (static_cast<int64_t>(units_) + micro_batch_size_ - 1) / micro_batch_size_;
}

std::vector<size_t> EpochOrder::next() {
  if (order_epoch_ != position_.epoch) {
    if (sequential_) {
      order_.resize(units_);
      std::iota(order_.begin(), order_.end(), size_t{0});
    } else {
      order_ = seeded_permutation(units_, seed_ + static_cast<uint64_t>(position_.epoch));
    }
    order_epoch_ = position_.epoch;
  }
  const size_t begin = static_cast<size_t>(position_.batch * micro_batch_size_);
  const size_t end = std::min(order_.size(), begin + static_cast<size_t>(micro_batch_size_));
  std::vector<size_t> out(order_.begin() + static_cast<std::ptrdiff_t>(begin),
                          order_.begin() + static_cast<std::ptrdiff_t>(end));
  if (++position_.batch == batches_per_epoch()) position_ = {position_.epoch + 1, 0};
  return out;
}

bool EpochOrder::holds(LoaderPosition p) const {
  return p.epoch >= 0 && p.batch >= 0 && p.batch < batches_per_epoch();
}

int64_t DataLoader::batches_per_epoch() const {
  return order_.batches_per_epoch();
}

Batch DataLoader::next() {
  std::vector<std::vector<size_t>> rows;
  int64_t width = sequence_len_;
  if (packing_) {
    for (const size_t r : order_.next()) rows.push_back(rows_[r]);
  } else {
    width = 0;
    for (const size_t i : order_.next()) {
      rows.push_back({i});
      width = std::max(width, static_cast<int64_t>(samples_[i].input_ids.size()));
    }
  }
  return make_batch_from_rows(samples_, rows, width, pad_id_);
}

void DataLoader::seek(Position p) {
  TORCH_CHECK(order_.holds(p),
              "DataLoader::seek: position (epoch ",
              p.epoch,
              ", batch ",
              p.batch,
              ") is outside the data, which has ",
              batches_per_epoch(),
              " batches per epoch; was the checkpoint saved with other data, micro_batch_size, sequence_len or "
              "sample_packing?");
  order_.seek(p);
}

}  // namespace qtrain::engine::data
