// Hand-made tokenizer.json files for the unit tests of engine/text: a BPE model over a listed
// vocabulary (ids in list order), plus whatever components a test sets.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/text/tokenizer.h"

namespace qtrain::engine::text::test {

inline nlohmann::json tiny_json(const std::vector<std::string>& vocab, const nlohmann::json& merges) {
  nlohmann::json v = nlohmann::json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = nullptr;
  j["decoder"] = nullptr;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", v},
                {"merges", merges}};
  return j;
}

inline nlohmann::json added(int id, const std::string& content, bool special = true) {
  return {{"id", id},
          {"content", content},
          {"single_word", false},
          {"lstrip", false},
          {"rstrip", false},
          {"normalized", false},
          {"special", special}};
}

inline Tokenizer make(const nlohmann::json& j) {
  return Tokenizer::from_json(j.dump(), "tiny/tokenizer.json");
}

// The token strings of an encoding, for readable expectations.
inline std::vector<std::string> tokens_of(const Tokenizer& t, const std::string& text, bool special = false) {
  return t.encode(text, special).tokens;
}

}  // namespace qtrain::engine::text::test
