// Collecting the problems of a run config, so that all of them are reported at once; see
// Note [Every problem at once].
#pragma once

#include <c10/util/Exception.h>

#include <set>
#include <string>
#include <vector>

namespace qtrain::engine::config {

// Note [Every problem at once]
// A config with three mistakes should take one edit, not three runs. Each key is read on its own:
// a read that fails throws as before, the throw is caught where that key is read, recorded, and
// reading goes on with the key's default. A check of a combination is skipped when one of its
// keys already failed, so a typo does not also report the contradictions of the default that
// stood in for it. One problem is thrown as it is; several are thrown together, as found: keys
// that are unknown or refused, then values in the order of the keys, then combinations.
class Problems {
 public:
  // Runs `check`; a c10::Error it throws is recorded against keys[0]. Skipped when one of `keys`
  // has already failed.
  template <class F>
  void guard(const std::vector<std::string>& keys, F&& check) {
    for (const std::string& key : keys) {
      if (failed_.contains(key)) return;
    }
    try {
      check();
    } catch (const c10::Error& e) {
      failed_.insert(keys.front());
      messages_.push_back(e.msg());
    }
  }

  void throw_if_any(const std::string& source) const;

 private:
  std::set<std::string> failed_;
  std::vector<std::string> messages_;
};

}  // namespace qtrain::engine::config
