// The suggestion an unknown name gets: the nearest known one by edit distance, so that a typo in
// a key or a value is answered with the spelling it missed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace qtrain::engine::config {

// The Levenshtein distance: single-character insertions, deletions and substitutions.
size_t edit_distance(const std::string& a, const std::string& b);

// The closest candidate within max(2, len/3) edits; the first in list order wins a tie.
std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates);

// "unknown key '<key>'" with the nearest candidate, or a pointer to docs/CONFIG.md.
std::string unknown_key_message(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace qtrain::engine::config
