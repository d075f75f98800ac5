// The BPE model of tokenizer.json (`model`, type BPE), exactly as HF `tokenizers` 0.23.3 runs
// it (models/bpe/model.rs and word.rs): vocabulary, merges ("a b" strings or [a, b] pairs),
// ignore_merges, byte_fallback, unk_token with fuse_unk, continuing_subword_prefix and
// end_of_word_suffix. dropout must be null or 0 (anything else is random in HF).
// See Note [BPE merge order].
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/text/merge_table.h"
#include "engine/text/text_error.h"

namespace qtrain::engine::text {

// One token of a piece: its id and its byte range in the piece.
struct PieceToken {
  int32_t id;
  uint32_t begin;
  uint32_t end;
};

// The largest token id a vocabulary may hold: below the largest vocab_size config.json may give
// (2^22, engine/model/model_config.cpp), so that every id can index a model's embedding. The
// largest real vocabularies (Gemma's) have 262,144 tokens.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

class Bpe {
 public:
  static Bpe parse(const nlohmann::json& j, const JsonSite& site);

  // The tokens of one pre-tokenized piece (empty for an empty piece).
  std::vector<PieceToken> tokenize(std::string_view piece) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < vocab_r_.size() ? vocab_r_[id] : nullptr;
  }
  size_t vocab_entries() const { return vocab_.size(); }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t begin;
    uint32_t len;
  };
  std::vector<Symbol> merge_word(std::string_view piece) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<const std::string*> vocab_r_;  // by id: the key in vocab_, or null
  MergeTable merges_;
  // Ids of one-character tokens by code point, below kDirectChars (-1: not in the vocabulary):
  // every character of a byte-level vocabulary, without a hash lookup.
  static constexpr char32_t kDirectChars = 0x800;
  std::vector<int32_t> char_ids_;
  std::optional<std::string> unk_token_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0xXX> ids, -1 when absent (only with byte_fallback)

  // See Note [BPE cache].
  struct Cache {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<PieceToken>, StringHash, std::equal_to<>> entries;
  };
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();
};

}  // namespace qtrain::engine::text
