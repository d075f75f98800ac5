// See pretokenized.h.
#include "engine/data/pretokenized.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <new>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "engine/text/json_depth.h"
#include "engine/text/regular_file.h"

namespace qtrain::engine::data {

std::vector<int64_t> int_list(const nlohmann::ordered_json& row, const char* key, const std::string& where) {
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

// Each id in [0, vocab_size), or -100 where `ignore` allows it (labels): an id outside the
// embedding would otherwise fail only when its batch is reached, without the file or row.
void check_ids(
    const std::vector<int64_t>& ids, const char* key, int64_t vocab_size, bool ignore, const std::string& where) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    TORCH_CHECK((id >= 0 && id < vocab_size) || (ignore && id == -100),
                where,
                ": \"",
                key,
                "\"[",
                i,
                "] is ",
                id,
                ", outside the model's vocabulary [0, ",
                vocab_size,
                ")",
                ignore ? " (or -100, not predicted)" : "",
                "; was the data tokenized for another model?");
  }
}

namespace {

// Note [Pre-tokenized attention_mask]
// A row may carry the attention_mask its tokenizer wrote. Padding (mask 0) at the start or end of
// the row is removed with its labels, so that it is neither attended to nor trained on, as the
// Python stack masks it; a 0 between 1s has no meaning in a causal sequence and is an error.
void strip_padding(Sample& s, const std::vector<int64_t>& mask, const std::string& where) {
  TORCH_CHECK(mask.size() == s.input_ids.size(),
              where,
              ": \"attention_mask\" has ",
              mask.size(),
              " entries but \"input_ids\" has ",
              s.input_ids.size());
  const auto bad = std::find_if(mask.begin(), mask.end(), [](int64_t m) { return m != 0 && m != 1; });
  TORCH_CHECK(bad == mask.end(),
              where,
              ": \"attention_mask\"[",
              bad - mask.begin(),
              "] is ",
              bad == mask.end() ? 0 : *bad,
              "; it must hold 0 (padding) or 1");
  const auto first = std::find(mask.begin(), mask.end(), 1);
  TORCH_CHECK(first != mask.end(), where, ": \"attention_mask\" is all 0: the row is only padding; remove it");
  const auto last = std::find(mask.rbegin(), mask.rend(), 1).base();  // one past the last 1
  const auto hole = std::find(first, last, 0);
  TORCH_CHECK(hole == last,
              where,
              ": \"attention_mask\"[",
              hole - mask.begin(),
              "] is 0 between 1s; qtrain takes padding only at the start or end of a row (remove the padding "
              "inside it, or split the row in two)");
  const auto begin = first - mask.begin(), end = last - mask.begin();
  s.input_ids = std::vector<int64_t>(s.input_ids.begin() + begin, s.input_ids.begin() + end);
  s.labels = std::vector<int64_t>(s.labels.begin() + begin, s.labels.begin() + end);
}

}  // namespace

nlohmann::ordered_json parse_jsonl_row(const std::string& line, const std::string& where) {
  const auto problem = text::json_depth_problem(line);
  TORCH_CHECK(problem.empty(), where, ": ", problem);
  nlohmann::ordered_json row;
  try {
    row = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    TORCH_CHECK(false, where, ": not valid JSON (", e.what(), "); each line must be one JSON object");
  }
  TORCH_CHECK(row.is_object(), where, ": each line must be one JSON object, found a JSON ", row.type_name());
  return row;
}

int64_t for_each_jsonl_row(
    const std::filesystem::path& path,
    const std::function<void(const nlohmann::ordered_json& row, const std::string& where)>& visit) {
  const auto file_problem = text::regular_file_problem(path);
  TORCH_CHECK(file_problem.empty(), "dataset ", path.string(), " ", file_problem);
  std::ifstream in(path);
  TORCH_CHECK(in, path.string(), ": cannot open the dataset file (does it exist, is it readable?)");
  int64_t rows = 0;
  // A .json file may hold one JSON array of rows instead of JSON Lines, as `datasets` reads both.
  auto ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".json" && (in >> std::ws).peek() == '[') {
    const std::string contents(std::istreambuf_iterator<char>(in), {});
    const auto depth_problem = text::json_depth_problem(contents);
    TORCH_CHECK(depth_problem.empty(), path.string(), ": ", depth_problem);
    nlohmann::ordered_json array;
    try {
      array = nlohmann::ordered_json::parse(contents);
    } catch (const nlohmann::json::parse_error& e) {
      TORCH_CHECK(false, path.string(), ": not a valid JSON array of rows (", e.what(), ")");
    }
    for (size_t i = 0; i < array.size(); ++i) {
      const auto where = path.string() + ": row [" + std::to_string(i) + "]";
      TORCH_CHECK(
          array[i].is_object(), where, ": each row must be one JSON object, found a JSON ", array[i].type_name());
      visit(array[i], where);
      ++rows;
    }
    return rows;
  }
  in.seekg(0);
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = path.string() + ":" + std::to_string(lineno);
    try {
      visit(parse_jsonl_row(line, where), where);
    } catch (const std::bad_alloc&) {
      // A row's parsed JSON takes tens of times its text (a 100 MB row of ids took 3 GB): name
      // the row rather than end in a bare std::bad_alloc.
      TORCH_CHECK(false,
                  where,
                  ": reading this row of ",
                  line.size() / 1000000.0,
                  " MB ran out of memory (its parsed JSON takes tens of times its size); split it into rows of "
                  "about sequence_len tokens each, or give the process more memory");
    }
    ++rows;
  }
  return rows;
}

std::vector<Sample> read_pretokenized_jsonl(const std::filesystem::path& path,
                                            int64_t sequence_len,
                                            int64_t vocab_size) {
  TORCH_CHECK(sequence_len > 1, "sequence_len must be at least 2, got ", sequence_len);
  std::vector<Sample> samples;
  for_each_jsonl_row(path, [&](const nlohmann::ordered_json& row, const std::string& where) {
    TORCH_CHECK(row.contains("input_ids"),
                where,
                ": a pre-tokenized row needs \"input_ids\"; for text rows give the dataset a type "
                "(completion or alpaca)");
    Sample s;
    s.input_ids = int_list(row, "input_ids", where);
    TORCH_CHECK(!s.input_ids.empty(), where, ": \"input_ids\" is empty");
    if (row.contains("labels")) {
      s.labels = int_list(row, "labels", where);
      TORCH_CHECK(s.labels.size() == s.input_ids.size(),
                  where,
                  ": \"labels\" has ",
                  s.labels.size(),
                  " entries but \"input_ids\" has ",
                  s.input_ids.size());
    } else {
      s.labels = s.input_ids;
    }
    check_ids(s.input_ids, "input_ids", vocab_size, false, where);
    check_ids(s.labels, "labels", vocab_size, true, where);
    if (row.contains("attention_mask")) strip_padding(s, int_list(row, "attention_mask", where), where);
    if (static_cast<int64_t>(s.input_ids.size()) > sequence_len) {
      s.input_ids.resize(sequence_len);
      s.labels.resize(sequence_len);
    }
    samples.push_back(std::move(s));
  });
  TORCH_CHECK(!samples.empty(), path.string(), ": the dataset has no rows");
  return samples;
}

int64_t Batch::tokens() const {
  const int64_t T = labels.size(1);
  if (T < 2) return 0;
  const auto next_labels = labels.slice(1, 1, T);
  const auto same_segment = segment_ids.slice(1, 1, T) == segment_ids.slice(1, 0, T - 1);
  return ((next_labels != -100) & same_segment).sum().item<int64_t>();
}

Batch make_batch_from_rows(const std::vector<Sample>& samples,
                           const std::vector<std::vector<size_t>>& rows,
                           int64_t width,
                           int64_t pad_id) {
  TORCH_CHECK(!rows.empty() && width > 0, "make_batch_from_rows: ", rows.size(), " rows of width ", width);
  const auto batch = static_cast<int64_t>(rows.size());
  auto ids = at::full({batch, width}, pad_id, at::kLong);
  auto labels = at::full({batch, width}, int64_t{-100}, at::kLong);
  auto positions = at::zeros({batch, width}, at::kLong);
  auto segments = at::full({batch, width}, int64_t{-1}, at::kLong);
  for (int64_t r = 0; r < batch; ++r) {
    int64_t* id_row = ids.data_ptr<int64_t>() + r * width;
    int64_t* label_row = labels.data_ptr<int64_t>() + r * width;
    int64_t* position_row = positions.data_ptr<int64_t>() + r * width;
    int64_t* segment_row = segments.data_ptr<int64_t>() + r * width;
    int64_t offset = 0;
    for (size_t k = 0; k < rows[r].size(); ++k) {
      const size_t index = rows[r][k];
      TORCH_CHECK(index < samples.size(), "make_batch_from_rows: sample ", index, " of ", samples.size());
      const Sample& s = samples[index];
      const auto len = static_cast<int64_t>(s.input_ids.size());
      TORCH_CHECK(len > 0 && s.labels.size() == s.input_ids.size(),
                  "make_batch_from_rows: sample ",
                  index,
                  " has ",
                  len,
                  " input_ids and ",
                  s.labels.size(),
                  " labels");
      TORCH_CHECK(
          offset + len <= width, "make_batch_from_rows: the samples of row ", r, " need more than ", width, " tokens");
      std::copy(s.input_ids.begin(), s.input_ids.end(), id_row + offset);
      std::copy(s.labels.begin(), s.labels.end(), label_row + offset);
      // See Note [Packed batch layout]: no loss across the boundary into this sample.
      label_row[offset] = -100;
      for (int64_t t = 0; t < len; ++t) {
        position_row[offset + t] = t;
        segment_row[offset + t] = static_cast<int64_t>(k);
      }
      offset += len;
    }
  }
  return {ids, labels, positions, segments};
}

Batch make_batch(const std::vector<Sample>& samples, size_t begin, size_t end, int64_t pad_id) {
  TORCH_CHECK(begin < end && end <= samples.size(),
              "make_batch: bad range [",
              begin,
              ", ",
              end,
              ") of ",
              samples.size(),
              " samples");
  size_t longest = 0;
  std::vector<std::vector<size_t>> rows;
  for (size_t i = begin; i < end; ++i) {
    longest = std::max(longest, samples[i].input_ids.size());
    rows.push_back({i});
  }
  return make_batch_from_rows(samples, rows, static_cast<int64_t>(longest), pad_id);
}

std::string pretokenized_jsonl(const std::vector<Sample>& samples) {
  std::string text;
  for (const auto& s : samples) {
    text += nlohmann::ordered_json{{"input_ids", s.input_ids}, {"labels", s.labels}}.dump() + "\n";
  }
  return text;
}

}  // namespace qtrain::engine::data
