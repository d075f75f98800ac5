// See bpe.h.
#include "engine/text/bpe.h"

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "engine/text/json_fields.h"
#include "engine/text/utf8.h"

namespace qtrain::engine::text {

// Note [BPE merge order]
// HF's Word::merge_all, reproduced step for step. Every adjacent symbol pair found in the merge
// table goes into a min-heap ordered by (rank, position of the left symbol). Pop the top; skip
// it when its left symbol is gone (merged into its left neighbour), has no right neighbour, or
// is stale: the current (left, right) pair no longer merges into the entry's new id (one of
// the two symbols already merged with something else; since merged symbols only grow, the id
// check is exact). Otherwise merge the right symbol into the left one and push the pairs the
// new symbol forms with its neighbours. The result equals "apply the lowest-rank adjacent
// pair, leftmost first, until none applies". Merges are ranked by their position in the file;
// a pair listed twice keeps the last rank (HF builds a HashMap from the list).
//
// Before merging, merge_word turns the piece into symbols character by character: a character
// in the vocabulary is a symbol; otherwise with byte_fallback each of its UTF-8 bytes becomes
// a <0xXX> symbol if all of them exist (all or nothing per character); otherwise it becomes
// unk (consecutive unks fused into one with fuse_unk), or is dropped when there is no
// unk_token. A quirk kept on purpose: a pending unk is written only when the next known
// character arrives, so byte-fallback symbols that follow an unk come before it.

// Note [BPE cache]
// As HF does, the tokens of pieces shorter than 256 bytes are kept (up to 10,000 pieces; then no
// more are added) so that a repeated word is merged once. The result of a piece depends on the
// piece alone, so the cache never changes results. It is shared by all threads behind a
// readers-writer lock taken only when free, as HF's Cache (utils/cache.rs) does with try_read and
// try_write: a thread never waits for the cache, it merges the piece itself instead, and once the
// cache is full it is only read.
constexpr size_t kCacheMaxPieceBytes = 256;
constexpr size_t kCacheCapacity = 10'000;

Bpe Bpe::parse(const nlohmann::json& j, const JsonSite& site) {
  check_keys(j,
             site,
             {"dropout",
              "unk_token",
              "continuing_subword_prefix",
              "end_of_word_suffix",
              "fuse_unk",
              "byte_fallback",
              "ignore_merges",
              "vocab",
              "merges"});
  if (j.contains("type") && j["type"] != "BPE") {
    fail(site.key("type"), "model type " + j["type"].dump() + " is not supported by qtrain (supported: BPE)");
  }
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0) {
    fail(site.key("dropout"),
         "BPE dropout " + j["dropout"].dump() +
             " makes HF tokenize at random; qtrain tokenizes deterministically only: set \"dropout\": null");
  }
  Bpe m;
  m.unk_token_ = j.contains("unk_token") && !j["unk_token"].is_null()
                     ? std::optional<std::string>(field<std::string>(j, "unk_token", site, ""))
                     : std::nullopt;
  m.continuing_subword_prefix_ = field<std::string>(j, "continuing_subword_prefix", site, "");
  m.end_of_word_suffix_ = field<std::string>(j, "end_of_word_suffix", site, "");
  m.fuse_unk_ = field<bool>(j, "fuse_unk", site, false);
  m.byte_fallback_ = field<bool>(j, "byte_fallback", site, false);
  m.ignore_merges_ = field<bool>(j, "ignore_merges", site, false);

  const auto vsite = site.key("vocab");
  if (!j.contains("vocab") || !j["vocab"].is_object()) fail(vsite, "expected an object {token: id}");
  m.vocab_.reserve(j["vocab"].size());
  for (const auto& [token, id] : j["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      fail(vsite.key(token), "expected a non-negative integer id, got " + id.dump());
    }
    // Ids index a table here and a model's embedding later: a huge one is a broken file.
    if (id.get<int64_t>() > kMaxTokenId) {
      fail(vsite.key(token),
           "id " + id.dump() + " is above " + std::to_string(kMaxTokenId) +
               ", the largest token id qtrain accepts (no real vocabulary comes near it): the file is damaged");
    }
    m.vocab_.emplace(token, id.get<int32_t>());
  }
  for (const auto& [token, id] : m.vocab_) {
    if (static_cast<size_t>(id) >= m.vocab_r_.size()) m.vocab_r_.resize(static_cast<size_t>(id) + 1, nullptr);
    m.vocab_r_[id] = &token;  // node-based map: the key's address is stable
  }
  m.char_ids_.assign(kDirectChars, -1);
  for (const auto& [token, id] : m.vocab_) {
    size_t n = 0;
    if (token.empty()) continue;
    const char32_t c = utf8_decode(token, 0, &n);
    if (n == token.size() && c < kDirectChars) m.char_ids_[c] = id;
  }
  if (m.unk_token_) {
    const auto it = m.vocab_.find(*m.unk_token_);
    // HF fails only when an unknown character needs it; the file is broken either way.
    if (it == m.vocab_.end()) fail(site.key("unk_token"), "'" + *m.unk_token_ + "' is not in model.vocab");
    m.unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = m.vocab_.find(std::string_view(name));
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }

  const auto msite = site.key("merges");
  const auto& merges = j.contains("merges") ? j["merges"] : nlohmann::json::array();
  if (!merges.is_array()) fail(msite, "expected a list of merges");
  m.merges_ = MergeTable(merges.size());
  const size_t prefix_len = m.continuing_subword_prefix_.size();
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      // Legacy "a b": split at the one space (HF rejects anything else).
      const auto s = e.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail(msite.index(i), "expected \"left right\" (two tokens and one space), got " + e.dump());
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(msite.index(i), "expected \"left right\" or [\"left\", \"right\"], got " + e.dump());
    }
    const auto ia = m.vocab_.find(a), ib = m.vocab_.find(b);
    if (ia == m.vocab_.end()) fail(msite.index(i), "'" + a + "' is not in model.vocab");
    if (ib == m.vocab_.end()) fail(msite.index(i), "'" + b + "' is not in model.vocab");
    const std::string merged =
        a + (prefix_len > 0 && b.starts_with(m.continuing_subword_prefix_) ? b.substr(prefix_len) : b);
    const auto im = m.vocab_.find(merged);
    if (im == m.vocab_.end()) fail(msite.index(i), "the merged token '" + merged + "' is not in model.vocab");
    m.merges_.set(ia->second, ib->second, {static_cast<uint32_t>(i), im->second});
  }
  return m;
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::vector<Bpe::Symbol> Bpe::merge_word(std::string_view w) const {
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](int32_t id, uint32_t begin, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, begin, len});
    if (n > 0) symbols[n - 1].next = n;
  };
  bool unk = false;  // a pending unk at [unk_begin, unk_begin + unk_len)
  uint32_t unk_begin = 0, unk_len = 0;
  std::string scratch;
  for (size_t i = 0; i < w.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(w[i])), w.size() - i);
    const bool first = i == 0, last = i + n == w.size();
    std::string_view s = w.substr(i, n);
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      scratch.assign(first ? "" : continuing_subword_prefix_);
      scratch.append(s);
      if (last) scratch.append(end_of_word_suffix_);
      s = scratch;
    }
    const auto begin = static_cast<uint32_t>(i);
    const auto len = static_cast<uint32_t>(n);
    i += n;
    int32_t id = -1;
    size_t cn = 0;
    const char32_t c = s.size() == n ? utf8_decode(s, 0, &cn) : kDirectChars;
    if (c < kDirectChars) {
      id = char_ids_[c];
    } else if (const auto it = vocab_.find(s); it != vocab_.end()) {
      id = it->second;
    }
    if (id >= 0) {
      if (unk) add(*unk_id_, unk_begin, unk_len);
      unk = false;
      add(id, begin, len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // Each byte symbol has length 1 in the piece (HF: word.add(id, 1)).
        uint32_t at = begin;
        for (const char c : s) add(byte_ids_[static_cast<unsigned char>(c)], std::min(at++, begin + len - 1), 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk && fuse_unk_) {
        unk_len += len;
      } else {
        if (unk) add(*unk_id_, unk_begin, unk_len);
        unk = true;
        unk_begin = begin;
        unk_len = len;
      }
    }
  }
  if (unk) add(*unk_id_, unk_begin, unk_len);
  return symbols;
}

void Bpe::merge_all(std::vector<Symbol>& symbols) const {
  struct Entry {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto* m = merges_.find(symbols[i].id, symbols[i + 1].id))
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
  }
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const int32_t next_pos = left.next;
    const Symbol right = symbols[next_pos];
    const auto* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const auto* p = merges_.find(symbols[left.prev].id, left.id)) queue.push({p->rank, left.prev, p->new_id});
    }
    if (left.next >= 0) {
      if (const auto* q = merges_.find(left.id, symbols[left.next].id)) queue.push({q->rank, top.pos, q->new_id});
    }
  }
}

std::vector<PieceToken> Bpe::tokenize(std::string_view piece) const {
  if (piece.empty()) return {};
  if (ignore_merges_) {
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      return {{it->second, 0, static_cast<uint32_t>(piece.size())}};
    }
  }
  const bool cacheable = piece.size() < kCacheMaxPieceBytes;
  if (cacheable) {
    std::shared_lock<std::shared_mutex> lock(cache_->mutex, std::try_to_lock);
    if (lock.owns_lock()) {
      if (const auto it = cache_->entries.find(piece); it != cache_->entries.end()) return it->second;
    }
  }
  auto symbols = merge_word(piece);
  merge_all(symbols);
  std::vector<PieceToken> tokens;
  tokens.reserve(symbols.size());
  for (const auto& s : symbols) {
    if (s.len != 0) tokens.push_back({s.id, s.begin, s.begin + s.len});
  }
  if (cacheable) {
    bool room = false;
    if (std::shared_lock<std::shared_mutex> lock(cache_->mutex, std::try_to_lock); lock.owns_lock()) {
      room = cache_->entries.size() < kCacheCapacity;
    }
    std::unique_lock<std::shared_mutex> lock(cache_->mutex, std::defer_lock);
    if (room && lock.try_lock() && cache_->entries.size() < kCacheCapacity) cache_->entries.emplace(piece, tokens);
  }
  return tokens;
}

}  // namespace qtrain::engine::text
