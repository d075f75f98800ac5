// See kto_rows.h and Note [KTO rows] there.
#include "engine/data/kto_rows.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "engine/data/preference_rows.h"
#include "engine/data/pretokenized.h"

namespace qtrain::engine::data {
namespace {

// datasets' default map batch, in which TRL's unpair_preference_dataset works.
constexpr size_t kUnpairBlock = 1000;

bool is_pair_row(const nlohmann::ordered_json& row) {
  return row.contains("chosen") || row.contains("chosen_ids");
}

// One labelled row (KL completion still empty).
PreferencePair kto_row(const nlohmann::ordered_json& row,
                       int64_t vocab_size,
                       const PreferenceRowTokenizer& text,
                       const std::string& where) {
  TORCH_CHECK(row.contains("label") && row.at("label").is_boolean(),
              where,
              ": a KTO row needs \"label\": true (a desirable completion) or false (an undesirable one)",
              row.contains("label") ? ", got " + row.at("label").dump() : std::string());
  PreferencePair p;
  p.desirable = row.at("label").get<bool>();
  if (row.contains("prompt_ids") || row.contains("completion_ids")) {
    p.prompt = int_list(row, "prompt_ids", where);
    p.chosen = int_list(row, "completion_ids", where);
    check_ids(p.prompt, "prompt_ids", vocab_size, false, where);
    check_ids(p.chosen, "completion_ids", vocab_size, false, where);
    TORCH_CHECK(!p.chosen.empty(), where, ": \"completion_ids\" must hold a token");
    return p;
  }
  TORCH_CHECK(row.contains("prompt") && row.contains("completion"),
              where,
              ": a KTO row needs \"prompt\" and \"completion\" (text or messages) with \"label\", or the "
              "tokenized \"prompt_ids\" and \"completion_ids\"");
  TORCH_CHECK(text != nullptr,
              where,
              ": a KTO row of text or messages needs the model's tokenizer (tokenizer.json beside the base model, "
              "or tokenizer_config); or give the tokenized \"prompt_ids\" and \"completion_ids\"");
  // A pair of two equal completions tokenizes the prompt and the completion as TRL's KTOTrainer
  // does (Note [Preference rows]).
  const nlohmann::ordered_json pair = {
      {"prompt", row.at("prompt")}, {"chosen", row.at("completion")}, {"rejected", row.at("completion")}};
  auto tokenized = text(pair, where);
  check_ids(tokenized.prompt, "prompt", vocab_size, false, where);
  check_ids(tokenized.chosen, "completion", vocab_size, false, where);
  TORCH_CHECK(!tokenized.chosen.empty(), where, ": \"completion\" must tokenize to a token past the prompt");
  p.prompt = std::move(tokenized.prompt);
  p.chosen = std::move(tokenized.chosen);
  return p;
}

// A pair row's two KTO rows, its chosen completion (desirable) and its rejected one, each tokenized
// on its own as TRL tokenizes unpaired rows (after extracting the prompt where the row has none).
std::array<PreferencePair, 2> pair_rows(const nlohmann::ordered_json& row,
                                        int64_t vocab_size,
                                        const PreferenceRowTokenizer& text,
                                        const std::string& where) {
  const bool ids = row.contains("chosen_ids");
  TORCH_CHECK(row.contains(ids ? "rejected_ids" : "rejected"),
              where,
              ": a preference pair needs \"",
              ids ? "rejected_ids" : "rejected",
              "\" beside \"",
              ids ? "chosen_ids" : "chosen",
              "\"");
  const auto r = ids ? row : with_prompt(row, where);
  const auto side = [&](const char* key, bool desirable) {
    nlohmann::ordered_json one = {{"label", desirable}};
    const char* prompt = ids ? "prompt_ids" : "prompt";
    if (r.contains(prompt)) one[prompt] = r.at(prompt);  // else kto_row names it
    one[ids ? "completion_ids" : "completion"] = r.at(key);
    return kto_row(one, vocab_size, text, where);
  };
  return {side(ids ? "chosen_ids" : "chosen", true), side(ids ? "rejected_ids" : "rejected", false)};
}

// TRL's unpair_preference_dataset: per block of kUnpairBlock pairs, their chosen rows, then their
// rejected rows.
std::vector<PreferencePair> unpaired(const std::vector<std::array<PreferencePair, 2>>& pairs) {
  std::vector<PreferencePair> rows;
  rows.reserve(2 * pairs.size());
  for (size_t first = 0; first < pairs.size(); first += kUnpairBlock) {
    const size_t end = std::min(pairs.size(), first + kUnpairBlock);
    for (const size_t side : {0, 1}) {
      for (size_t i = first; i < end; ++i) rows.push_back(pairs[i][side]);
    }
  }
  return rows;
}

}  // namespace

std::vector<PreferencePair> read_kto_jsonl(const std::filesystem::path& path,
                                           int64_t vocab_size,
                                           const PreferenceRowTokenizer& text,
                                           const KtoRowType& type) {
  std::vector<PreferencePair> rows;
  std::vector<std::array<PreferencePair, 2>> pairs;  // a file of pairs': each pair's two rows
  for_each_jsonl_row(path, [&](const nlohmann::ordered_json& row, const std::string& where) {
    if (type) {
      rows.push_back(kto_row(type(row, where), vocab_size, text, where));
      return;
    }
    const bool pair = is_pair_row(row) && !row.contains("label");
    TORCH_CHECK((rows.empty() && pairs.empty()) || pair == !pairs.empty(),
                where,
                ": the file mixes KTO rows (\"prompt\", \"completion\", \"label\") with preference pairs (\"chosen\", "
                "\"rejected\"); give one kind per file");
    if (pair) {
      pairs.push_back(pair_rows(row, vocab_size, text, where));
    } else {
      rows.push_back(kto_row(row, vocab_size, text, where));
    }
  });
  if (!pairs.empty()) return unpaired(pairs);
  TORCH_CHECK(!rows.empty(), path.string(), ": holds no KTO rows");
  return rows;
}

void with_kl_completions(std::vector<PreferencePair>& rows, int64_t run_size) {
  TORCH_CHECK(run_size >= 1, "with_kl_completions: run size must be at least 1, got ", run_size);
  const auto n = static_cast<size_t>(run_size);
  for (size_t first = 0; first < rows.size(); first += n) {
    const size_t end = std::min(rows.size(), first + n);
    for (size_t i = first; i < end; ++i) rows[i].rejected = rows[i == first ? end - 1 : i - 1].chosen;
  }
}

}  // namespace qtrain::engine::data
