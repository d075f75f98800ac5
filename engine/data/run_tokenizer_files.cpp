// See run_tokenizer_files.h.
#include "engine/data/run_tokenizer_files.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

namespace qtrain::engine::data {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

ordered_json read_json(const fs::path& file) {
  std::ifstream in(file);
  TORCH_CHECK(in, file.string(), ": cannot be read");
  try {
    return ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, file.string(), ": not valid JSON (", e.what(), ")");
  }
}

void write_json(const fs::path& file, const ordered_json& j) {
  std::ofstream out(file, std::ios::trunc);
  out << j.dump(2, ' ', /*ensure_ascii=*/false) << "\n";
  TORCH_CHECK(out.good(), file.string(), ": cannot be written");
}

// One added token as tokenizer.json lists it, in transformers' key order.
ordered_json added_token(int64_t id, const std::string& content, bool special) {
  ordered_json t;
  t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  t["normalized"] = false;
  t["special"] = special;
  return t;
}

}  // namespace

bool write_run_tokens(const fs::path& folder, const config::RunConfig& c, const TextTokenizer& run_tokenizer) {
  const auto tokenizer_file = folder / "tokenizer.json";
  if (!fs::exists(tokenizer_file)) return false;
  const auto& s = c.special_tokens;
  const std::vector<std::pair<std::string, std::string>> roles = {
      {"bos_token", s.bos_token}, {"eos_token", s.eos_token}, {"pad_token", s.pad_token}, {"unk_token", s.unk_token}};
  std::vector<std::pair<std::string, bool>> wanted;  // content, special
  for (const auto& [role, token] : roles) {
    if (!token.empty()) wanted.emplace_back(token, true);
  }
  for (const auto& token : c.tokens) wanted.emplace_back(token, false);
  if (wanted.empty()) return false;

  auto tokenizer = read_json(tokenizer_file);
  auto& listed = tokenizer["added_tokens"];
  if (!listed.is_array()) listed = ordered_json::array();
  const auto config_file = folder / "tokenizer_config.json";
  auto config = fs::exists(config_file) ? read_json(config_file) : ordered_json::object();
  for (const auto& [content, special] : wanted) {
    const bool known = std::any_of(listed.begin(), listed.end(), [&](const ordered_json& t) {
      return t.contains("content") && t["content"] == content;
    });
    if (known) continue;
    const auto id = run_tokenizer.id_of(content);
    TORCH_CHECK(id.has_value(), "write_run_tokens: the run's tokenizer has no id for '", content, "'");
    listed.push_back(added_token(*id, content, special));
  }
  // save_pretrained lists them by id.
  std::stable_sort(listed.begin(), listed.end(), [](const ordered_json& a, const ordered_json& b) {
    return a.value("id", int64_t{0}) < b.value("id", int64_t{0});
  });
  // tokenizer_config.json's added_tokens_decoder lists them all, as save_pretrained writes it:
  // transformers takes that list over tokenizer.json's where both are.
  ordered_json decoder = ordered_json::object();
  for (const auto& t : listed) {
    auto fields = t;
    fields.erase("id");
    decoder[std::to_string(t.value("id", int64_t{0}))] = fields;
  }
  config["added_tokens_decoder"] = decoder;
  for (const auto& [role, token] : roles) {
    if (!token.empty()) config[role] = token;
  }
  write_json(tokenizer_file, tokenizer);
  write_json(config_file, config);
  if (const auto map_file = folder / "special_tokens_map.json"; fs::exists(map_file)) {
    auto map = read_json(map_file);
    for (const auto& [role, token] : roles) {
      if (!token.empty()) map[role] = token;
    }
    write_json(map_file, map);
  }
  return true;
}

}  // namespace qtrain::engine::data
