// A compiled Oniguruma regex with the matching semantics of HF `tokenizers` (its
// `utils/onig.rs` uses the `onig` crate: ONIG_SYNTAX_DEFAULT, ONIG_OPTION_NONE, UTF-8).
// See Note [Regex engine].
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qtrain::engine::text {

// Byte range [begin, end) of a match.
using Match = std::pair<size_t, size_t>;

class Regex {
 public:
  // Compiles once; a pattern Oniguruma rejects throws TokenizerError with Oniguruma's message
  // (the caller adds where the pattern came from).
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The onig crate's find_iter: non-overlapping, leftmost-first matches, left to right; an empty
  // match right where the previous match ended is skipped by advancing one character. Safe to
  // call from several threads at once.
  std::vector<Match> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* regex_ = nullptr;  // OnigRegex; void* keeps oniguruma.h out of this header
};

}  // namespace qtrain::engine::text
