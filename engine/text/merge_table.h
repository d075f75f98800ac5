// The BPE merge table: (left id, right id) -> (rank, merged id), as a flat open-addressing hash
// table. Merging looks a pair up for every adjacent pair of symbols, which made the lookup the
// hot spot of tokenization with std::unordered_map (a pointer chase per probe on a table of
// 150k-300k entries); here a lookup is one probe into one array, most of the time.
#pragma once

#include <cstdint>
#include <vector>

namespace qtrain::engine::text {

class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };

  explicit MergeTable(size_t expected = 0) { reserve(expected); }

  // Inserts or overwrites (a pair listed twice keeps the last rank, as HF's HashMap insert).
  void set(int32_t a, int32_t b, Merge m) {
    if ((size_ + 1) * 2 > slots_.size()) reserve(slots_.size() + 1);
    const uint64_t key = pair_key(a, b);
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty) {
        s = {key, m};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.merge = m;
        return;
      }
    }
  }

  const Merge* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pair_key(a, b);
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative, so no pair has this key
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t index(uint64_t key) const {
    key ^= key >> 33;  // the murmur3 finalizer: spreads both ids over the low bits
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask_;
  }
  // Grows to the next power of two holding `expected` entries at most half full, rehashing.
  void reserve(size_t expected) {
    size_t capacity = 16;
    while (capacity < expected * 2) capacity *= 2;
    if (capacity <= slots_.size()) return;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) set(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFF), s.merge);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace qtrain::engine::text
