// See output_dir.h.
#include "engine/train/output_dir.h"

#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "engine/io/path_within.h"
#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/train/metrics_log.h"
#include "engine/train/run_state.h"

namespace qtrain::engine::train {
namespace fs = std::filesystem;
namespace {

// What an earlier run left in `dir`: its checkpoints, its final adapter, its metrics.
std::vector<fs::path> earlier_run(const fs::path& dir) {
  std::vector<fs::path> found = list_checkpoints(dir);
  for (const char* name : {io::kPeftWeightsFile, "adapter_config.json", kMetricsFile, kTensorBoardDir}) {
    std::error_code ec;
    if (fs::exists(dir / name, ec)) found.push_back(dir / name);
  }
  return found;
}

std::string names(const std::vector<fs::path>& paths) {
  std::string out;
  for (size_t i = 0; i < paths.size() && i < 4; ++i) out += (i ? ", " : "") + paths[i].filename().string();
  return paths.size() > 4 ? out + ", ..." : out;
}

}  // namespace

fs::path prepare_output_dir(const config::RunConfig& c, std::FILE* log) {
  fs::path resume = c.resume_from_checkpoint;
  if (c.resume_from_latest_checkpoint || c.auto_resume_from_checkpoints) {
    const auto all = list_checkpoints(c.output_dir);
    TORCH_CHECK(!all.empty() || !c.resume_from_latest_checkpoint,
                "resume_from_checkpoint: true, but output_dir ",
                c.output_dir.string(),
                " holds no checkpoint-N folder to resume from; set resume_from_checkpoint: false to start from "
                "scratch, give the path of a checkpoint, or use auto_resume_from_checkpoints: true to resume only "
                "when there is one");
    if (!all.empty()) resume = all.back();
  }
  if (!resume.empty() && io::path_within(resume, c.output_dir)) return resume;

  const auto found = earlier_run(c.output_dir);
  if (found.empty()) return resume;
  // Note [An attempt killed before its first checkpoint]
  // A job restarted with auto_resume_from_checkpoints (a preempted cluster job, a crash loop)
  // may find only the logs of an attempt that died before it saved anything: with nothing to
  // continue, this attempt starts afresh in its place, replacing those logs, as the restart
  // asked. A finished run's adapter is never replaced this way.
  const bool only_logs = std::all_of(found.begin(), found.end(), [](const fs::path& p) {
    return p.filename() == kMetricsFile || p.filename() == kTensorBoardDir;
  });
  if (c.auto_resume_from_checkpoints && only_logs) {
    for (const auto& path : found) io::remove_tree(path);
    std::fprintf(log,
                 "output_dir: an earlier attempt left no checkpoint; starting afresh in place of its %s "
                 "(auto_resume_from_checkpoints: true)\n",
                 names(found).c_str());
    return resume;
  }
  TORCH_CHECK(c.overwrite_output_dir,
              "output_dir ",
              c.output_dir.string(),
              " already holds a run (",
              names(found),
              "); a new run there would mix its checkpoints with the old ones. Continue it with "
              "resume_from_checkpoint: true, choose another output_dir, or set overwrite_output_dir: true to "
              "delete the old run's files");
  for (const auto& path : found) io::remove_tree(path);
  std::fprintf(log, "output_dir: removed the earlier run's %s (overwrite_output_dir: true)\n", names(found).c_str());
  return resume;
}

}  // namespace qtrain::engine::train
