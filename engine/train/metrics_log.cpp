// metrics.jsonl and TensorBoard scalars; see metrics_log.h.
#include "engine/train/metrics_log.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>

namespace qtrain::engine::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// True when `path` exists, is not empty and its last byte is not a newline: the last line was
// torn by a crash.
bool ends_mid_line(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return false;
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) {
    return false;
  }
  in.seekg(-1, std::ios::end);
  char last = '\n';
  in.get(last);
  return last != '\n';
}

}  // namespace

std::string tensorboard_tag(const std::string& key) {
  const std::string_view k = key;
  if (k.starts_with("eval_")) {
    return "eval/" + key.substr(5);
  }
  if (k.starts_with("test_")) {
    return "test/" + key.substr(5);
  }
  return "train/" + key;
}

MetricsLog::MetricsLog(const fs::path& output_dir, bool tensorboard) : jsonl_path_(output_dir / kMetricsFile) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  TORCH_CHECK(!ec,
              "cannot create the output directory ",
              output_dir.string(),
              ": ",
              ec.message(),
              "; set output_dir to a folder you can write to");

  // A line torn by a crash stays on its own line, so the resumed run's first line parses.
  const bool torn = ends_mid_line(jsonl_path_);
  jsonl_.open(jsonl_path_, std::ios::out | std::ios::app | std::ios::binary);
  TORCH_CHECK(jsonl_.is_open(),
              "cannot open ",
              jsonl_path_.string(),
              " for appending: ",
              std::strerror(errno),
              "; set output_dir to a folder you can write to, or fix the file's permissions");
  if (torn) {
    jsonl_ << '\n';
  }

  if (tensorboard) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(output_dir / kTensorBoardDir);
  }
}

void MetricsLog::log(const json& record) {
  TORCH_CHECK(record.is_object(), "a metrics record must be a JSON object, got: ", record.dump());
  const auto step = record.find("step");
  TORCH_CHECK(step != record.end() && step->is_number_integer(),
              "metrics record has no integer \"step\": ",
              record.dump(),
              "; log every record with the global step it belongs to");

  // Strings the trainer did not produce (a dataset name, a path) may not be valid UTF-8; replace
  // bad bytes rather than losing the line.
  jsonl_ << record.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  jsonl_.flush();
  TORCH_CHECK(jsonl_.good(),
              "cannot write to ",
              jsonl_path_.string(),
              ": ",
              std::strerror(errno),
              "; check that the disk is not full");

  if (tensorboard_ != nullptr) {
    const int64_t at = step->get<int64_t>();
    const double now = wall_time_now();
    for (const auto& [key, value] : record.items()) {
      if (key == "step" || key == "epoch" || !value.is_number()) {
        continue;
      }
      tensorboard_->add_scalar(tensorboard_tag(key), value.get<double>(), at, now);
    }
    // As transformers does after each log: TensorBoard shows the run as it goes, and a crash
    // loses at most this record.
    tensorboard_->flush();
  }
}

void MetricsLog::flush() {
  jsonl_.flush();
  if (tensorboard_ != nullptr) {
    tensorboard_->flush();
  }
}

}  // namespace qtrain::engine::train
