// See row_map.h.
#include "engine/data/row_map.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <thread>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "engine/text/regular_file.h"

namespace qtrain::engine::data {
namespace {

// Note [Parallel rows]
// Rows are independent (a row's samples depend on the row, the tokenizer and the settings only),
// so a dataset converts in rounds: the calling thread reads up to chunk_rows lines (or 64 MiB),
// workers take the next unconverted line from a shared counter and write its samples into that
// line's slot, and the slots are appended to the output in line order once the round is done.
// The output is therefore the same, bit for bit, with any number of threads, and memory beyond the
// output is one round of lines and samples. A failing row records its exception in its slot; rows
// after the first failure are skipped, and the first failure by line order is rethrown, so the
// message is the one a single thread would give. The tokenizers and chat templates the rows go
// through are safe to share between threads (engine/text/tokenizer.h, chat_template.h).
constexpr size_t kChunkBytes = size_t{64} << 20;
constexpr auto kProgressPeriod = std::chrono::milliseconds(100);

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

// Non-blank lines of the file, for the progress total.
int64_t count_rows(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> block(size_t{1} << 20);
  int64_t rows = 0;
  bool content = false;  // the current line has a non-blank character
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      const char c = block[static_cast<size_t>(i)];
      if (c == '\n') {
        rows += content ? 1 : 0;
        content = false;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        content = true;
      }
    }
  }
  return rows + (content ? 1 : 0);
}

struct Line {
  std::string text;
  int64_t number = 0;
};

// A .json file that holds one JSON array of rows (as `datasets` reads it) instead of JSON Lines.
bool is_json_array(const std::filesystem::path& path, std::ifstream& in) {
  auto ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool array = ext == ".json" && (in >> std::ws).peek() == '[';
  in.seekg(0);
  return array;
}

}  // namespace

int64_t row_map_threads(int64_t threads) {
  return threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
}

std::vector<Sample> map_jsonl_rows(const std::filesystem::path& path,
                                   const RowMapOptions& options,
                                   const RowToSamples& to_samples) {
  const auto problem = text::regular_file_problem(path);
  TORCH_CHECK(problem.empty(), "dataset ", path.string(), " ", problem);
  std::ifstream in(path);
  TORCH_CHECK(in, path.string(), ": cannot open the dataset file (does it exist, is it readable?)");
  TORCH_CHECK(options.chunk_rows > 0, "map_jsonl_rows: chunk_rows must be positive, got ", options.chunk_rows);
  const bool sliced = options.slice.from || options.slice.to;
  if (is_json_array(path, in)) {
    // Parsed whole and converted on the calling thread, in order, by for_each_jsonl_row (twice
    // when sliced: first to count the rows).
    int64_t rows = 0;
    if (sliced) rows = for_each_jsonl_row(path, [](const nlohmann::ordered_json&, const std::string&) {});
    const auto [first, last] = config::split_rows(options.slice, rows);
    std::vector<Sample> out;
    int64_t index = 0;
    for_each_jsonl_row(path, [&](const nlohmann::ordered_json& row, const std::string& where) {
      if (!sliced || (index >= first && index < last)) to_samples(row, where, out);
      ++index;
    });
    return out;
  }
  const auto threads = static_cast<size_t>(row_map_threads(options.threads));
  const int64_t rows = options.progress || sliced ? count_rows(path) : 0;
  // The rows [first, last) of the file's non-blank lines are converted; the others are skipped.
  const auto [first, last] = sliced ? config::split_rows(options.slice, rows) : std::pair<int64_t, int64_t>{0, rows};
  const int64_t total = sliced ? std::max<int64_t>(last - first, 0) : rows;
  int64_t row_index = 0;

  std::vector<Sample> out;
  std::vector<Line> lines;
  std::vector<std::vector<Sample>> results;
  std::vector<std::exception_ptr> errors;
  int64_t done = 0;
  int64_t number = 0;
  std::string text;
  for (bool more = true; more;) {
    // See Note [Parallel rows]: read one round.
    lines.clear();
    size_t bytes = 0;
    while (static_cast<int64_t>(lines.size()) < options.chunk_rows && bytes < kChunkBytes) {
      if (!std::getline(in, text)) {
        more = false;
        break;
      }
      ++number;
      if (is_blank(text)) continue;
      const int64_t index = row_index++;
      if (sliced && index >= last) {
        more = false;
        break;
      }
      if (sliced && index < first) continue;
      bytes += text.size();
      lines.push_back({std::move(text), number});
    }
    if (lines.empty()) break;

    results.assign(lines.size(), {});
    errors.assign(lines.size(), nullptr);
    std::atomic<size_t> next{0};
    std::atomic<size_t> first_error{std::numeric_limits<size_t>::max()};
    std::atomic<int64_t> converted{0};
    std::mutex mutex;
    std::condition_variable finished;
    size_t running = std::min(threads, lines.size());
    auto work = [&] {
      for (size_t i = next++; i < lines.size(); i = next++) {
        if (i < first_error.load()) {
          try {
            const auto where = path.string() + ":" + std::to_string(lines[i].number);
            to_samples(parse_jsonl_row(lines[i].text, where), where, results[i]);
          } catch (...) {
            errors[i] = std::current_exception();
            size_t seen = first_error.load();
            while (i < seen && !first_error.compare_exchange_weak(seen, i)) {
            }
          }
        }
        ++converted;
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (--running == 0) finished.notify_one();
    };
    {
      std::vector<std::jthread> workers;
      for (size_t k = running; k > 0; --k) workers.emplace_back(work);
      std::unique_lock<std::mutex> lock(mutex);
      while (!finished.wait_for(lock, kProgressPeriod, [&] { return running == 0; })) {
        if (options.progress) options.progress(done + converted.load(), total);
      }
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (errors[i]) std::rethrow_exception(errors[i]);
      std::move(results[i].begin(), results[i].end(), std::back_inserter(out));
    }
    done += static_cast<int64_t>(lines.size());
  }
  if (options.progress) options.progress(done, total);
  return out;
}

}  // namespace qtrain::engine::data
