// A run's metrics: one JSON object per line in <output_dir>/metrics.jsonl, and optionally the same
// numbers as TensorBoard scalars in <output_dir>/runs/ (transformers' default logging_dir), under
// transformers' tag names so that qtrain runs and Trainer runs sit side by side in one TensorBoard.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/train/tensorboard_writer.h"

namespace qtrain::engine::train {

inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kTensorBoardDir = "runs";

// TensorBoard's tag for a metric key, as transformers' TensorBoardCallback (rewrite_logs) names
// it: "eval_loss" -> "eval/loss", "test_loss" -> "test/loss", anything else -> "train/<key>".
std::string tensorboard_tag(const std::string& key);

class MetricsLog {
 public:
  // Creates `output_dir` and opens metrics.jsonl for appending, so that a resumed run continues
  // the file; with `tensorboard`, also starts a new event file in <output_dir>/runs/.
  MetricsLog(const std::filesystem::path& output_dir, bool tensorboard);

  // Appends `record` (an object with an integer "step") as one line and flushes it, so a crash
  // loses at most the line being written. Every other numeric field except "epoch" goes to
  // TensorBoard as a scalar at that step (transformers also plots the epoch; qtrain leaves it to
  // the jsonl).
  void log(const nlohmann::json& record);
  void flush();

  const std::filesystem::path& jsonl_path() const { return jsonl_path_; }
  // Null without TensorBoard.
  const TensorBoardWriter* tensorboard() const { return tensorboard_.get(); }

 private:
  std::filesystem::path jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace qtrain::engine::train
