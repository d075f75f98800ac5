// See pretokenized.h.
#include "engine/data/pretokenized.h"

#include <fstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace qtrain::engine::data {
namespace {

std::vector<int64_t> int_list(const nlohmann::json& row, const char* key, const std::string& where) {
  const auto& v = row.at(key);
  TORCH_CHECK(v.is_array(), where, ": \"", key, "\" must be a list of integers, got ", v.type_name());
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const auto& x : v) {
    TORCH_CHECK(x.is_number_integer(), where, ": \"", key, "\" must hold integers, found ", x.dump());
    out.push_back(x.get<int64_t>());
  }
  return out;
}

}  // namespace

std::vector<Sample> read_pretokenized_jsonl(const std::filesystem::path& path, int64_t sequence_len) {
  TORCH_CHECK(sequence_len > 1, "sequence_len must be at least 2, got ", sequence_len);
  std::ifstream in(path);
  TORCH_CHECK(in, path.string(), ": cannot open the dataset file (does it exist, is it readable?)");
  std::vector<Sample> samples;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = path.string() + ":" + std::to_string(lineno);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      TORCH_CHECK(false, where, ": not valid JSON (", e.what(), "); each line must be one JSON object");
    }
    TORCH_CHECK(row.is_object() && row.contains("input_ids"), where,
                ": a pre-tokenized row needs \"input_ids\"; for text rows give the dataset a type "
                "(completion or alpaca)");
    Sample s;
    s.input_ids = int_list(row, "input_ids", where);
    TORCH_CHECK(!s.input_ids.empty(), where, ": \"input_ids\" is empty");
    if (row.contains("labels")) {
      s.labels = int_list(row, "labels", where);
      TORCH_CHECK(s.labels.size() == s.input_ids.size(), where, ": \"labels\" has ", s.labels.size(),
                  " entries but \"input_ids\" has ", s.input_ids.size());
    } else {
      s.labels = s.input_ids;
    }
    if (static_cast<int64_t>(s.input_ids.size()) > sequence_len) {
      s.input_ids.resize(sequence_len);
      s.labels.resize(sequence_len);
    }
    samples.push_back(std::move(s));
  }
  TORCH_CHECK(!samples.empty(), path.string(), ": the dataset has no rows");
  return samples;
}

Batch make_batch(const std::vector<Sample>& samples, size_t begin, size_t end, int64_t pad_id) {
  TORCH_CHECK(begin < end && end <= samples.size(), "make_batch: bad range [", begin, ", ", end, ") of ",
              samples.size(), " samples");
  size_t longest = 0;
  for (size_t i = begin; i < end; ++i) longest = std::max(longest, samples[i].input_ids.size());
  const auto rows = static_cast<int64_t>(end - begin);
  auto ids = at::full({rows, static_cast<int64_t>(longest)}, pad_id, at::kLong);
  auto labels = at::full({rows, static_cast<int64_t>(longest)}, int64_t{-100}, at::kLong);
  auto* id_ptr = ids.data_ptr<int64_t>();
  auto* label_ptr = labels.data_ptr<int64_t>();
  for (size_t i = begin; i < end; ++i) {
    const auto& s = samples[i];
    std::copy(s.input_ids.begin(), s.input_ids.end(), id_ptr + (i - begin) * longest);
    std::copy(s.labels.begin(), s.labels.end(), label_ptr + (i - begin) * longest);
  }
  return {ids, labels};
}

}  // namespace qtrain::engine::data
