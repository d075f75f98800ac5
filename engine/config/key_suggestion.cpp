// See key_suggestion.h.
#include "engine/config/key_suggestion.h"

#include <algorithm>

namespace qtrain::engine::config {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string unknown_key_message(const std::string& key, const std::vector<std::string>& candidates) {
  const auto suggestion = nearest(key, candidates);
  if (suggestion) {
    return "unknown key '" + key + "'; did you mean '" + *suggestion + "'?";
  }
  return "unknown key '" + key + "'; the keys are listed in docs/CONFIG.md";
}

}  // namespace qtrain::engine::config
